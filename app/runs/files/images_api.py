"""The images a run's job logged with TensorBoard (app/runs/files/images.py): listed by tag, served
one by one. Read access as for every run route: any signed-in user."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter
from fastapi import Path as PathParam
from fastapi.responses import Response

from app.db import SessionDep
from app.errors import NotFound
from app.http_errors import error_responses
from app.ownership import OwnedRun
from app.runs.files import images
from app.runs.schemas import RunImagesOut

router = APIRouter(prefix="/api", tags=["runs"])
MAX_INT32 = 2**31 - 1
PICTURE = {
    "image/png": {"schema": {"type": "string", "format": "binary"}},
    "image/jpeg": {"schema": {"type": "string", "format": "binary"}},
}
# The bytes of an image id never change (a newer image of the same step gets a new id), and
# a run's images are read by every signed-in user: the browser may keep them, privately.
IMMUTABLE = "private, max-age=31536000, immutable"


@router.get(
    "/runs/{run_id}/images", response_model=RunImagesOut, responses=error_responses(403, 404)
)
def list_run_images(run: OwnedRun, session: SessionDep) -> RunImagesOut:
    """Per tag, the images kept (steps ascending; the last is the newest): their ids for
    `/images/{image_id}`, step, wall time, size in pixels and bytes."""
    return RunImagesOut.model_validate({"tags": images.list_images(session, run_id=run.id)})


@router.get(
    "/runs/{run_id}/images/{image_id}",
    response_class=Response,
    responses={
        200: {"description": "The image, PNG or JPEG", "content": PICTURE},
        **error_responses(403, 404),
    },
)
def read_run_image(
    run: OwnedRun,
    image_id: Annotated[int, PathParam(ge=1, le=MAX_INT32)],
    session: SessionDep,
) -> Response:
    data = images.image_data(session, run_id=run.id, image_id=image_id)
    media = images.media_type(data) if data is not None else None
    if data is None or media is None:  # checked when stored; checked again before it is served
        raise NotFound.of("image", f"{image_id} of run {run.id}")
    extension = "png" if media == "image/png" else "jpg"
    return Response(
        data,
        media_type=media,
        headers={
            "Cache-Control": IMMUTABLE,
            "Content-Disposition": f'inline; filename="run-{run.id}-image-{image_id}.{extension}"',
            "Content-Security-Policy": "default-src 'none'; sandbox",
            "X-Content-Type-Options": "nosniff",
        },
    )
