"""Saved views: `POST /api/views` -> 201 {id, url}; `GET /api/views[?experiment_id=]` lists
yours and the shared ones; `GET`/`DELETE /api/views/{id}`; `PUT /api/views/{id}/default`
makes a shared view its experiment's default (the experiment's owner or an admin)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from app.auth.deps import CurrentUser
from app.db import MAX_ID, SessionDep
from app.http_errors import error_responses
from app.ownership import OwnedView, Writer, find_view
from app.saved_views import service
from app.saved_views.schemas import DefaultIn, ViewCreate, ViewCreated, ViewOut

router = APIRouter(prefix="/api/views", tags=["views"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ViewCreated,
    responses=error_responses(400, 403),
)
def create_view(data: ViewCreate, session: SessionDep, user: Writer) -> ViewCreated:
    """Save a page state. 422 naming the field for an unknown key in `state` (or anywhere),
    a value out of bounds, a state over 16 KiB of JSON, or an experiment that does not exist."""
    view = service.create_view(session, owner=user, data=data)
    return ViewCreated(id=view.id, url=service.view_url(view))


@router.get("", response_model=list[ViewOut])
def list_views(
    session: SessionDep,
    user: CurrentUser,
    experiment_id: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
) -> list[ViewOut]:
    """Your views and the shared ones (of one experiment with `experiment_id`), by name."""
    views = service.visible_views(session, user=user, experiment_id=experiment_id)
    return service.to_out(session, views)


@router.get("/{view_id}", response_model=ViewOut, responses=error_responses(404))
def read_view(view: OwnedView, session: SessionDep) -> ViewOut:
    """One view (404 for a teammate's private one)."""
    return service.to_out(session, [view])[0]


@router.delete(
    "/{view_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_class=Response,
    responses=error_responses(403, 404),
)
def delete_view(view: OwnedView, session: SessionDep) -> Response:
    """Only the view's owner (or an admin) deletes it: a teammate's shared view is 403."""
    service.delete_view(session, view=view)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.put(
    "/{view_id}/default",
    response_model=ViewOut,
    responses=error_responses(400, 403, 404),  # 400: a body that is not even JSON text
)
def set_default_view(
    view_id: int, data: DefaultIn, session: SessionDep, user: CurrentUser
) -> ViewOut:
    """Open the experiment's page with this view when no other is asked for (`default`:
    true; it replaces the default before), or stop (false). The experiment's owner or an
    admin decides, whoever saved the view; only a shared view can be a default (422)."""
    view = find_view(view_id, session, user, write=False)
    service.set_default(session, view=view, user=user, default=data.default)
    return service.to_out(session, [view])[0]
