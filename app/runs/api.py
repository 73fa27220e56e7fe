from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Header, Query, Request, status
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, PlainTextResponse, Response, StreamingResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent

from app.auth.deps import CurrentUser, request_token
from app.auth.service import token_refusal
from app.db import SessionDep
from app.errors import Invalid, NotFound
from app.experiments.config.model import run_config
from app.http_errors import error_responses
from app.metrics.downsample import MIN_MAX_POINTS
from app.metrics.service import read_series
from app.ownership import LaunchExperiment, OwnedExperiment, OwnedRun
from app.runs import service
from app.runs.files import logs
from app.runs.files.job_files import FileRefused
from app.runs.files.out import run_outs
from app.runs.files.work_dir import serve as work_dir
from app.runs.models import RunStatus
from app.runs.schemas import (
    CheckpointOut,
    MetricsOut,
    RunCreate,
    RunFileOut,
    RunOut,
    RunResume,
)
from app.runs.streams import events
from app.settings import get_settings

router = APIRouter(prefix="/api", tags=["runs"])
# A change to another user's run or experiment (or any change by a viewer) is 403, a missing
# one 404 (app/ownership.py); a change from a cookie session without the CSRF token is 403 too.
OWNED = error_responses(403, 404)
# The same for the routes that answer with text or an event stream.
OWNED_NOT_JSON = error_responses(401, 403, 404, non_json_route=True)
# Steps and byte offsets are 64-bit integer columns: a larger number is a 422, not an
# overflow in the database driver (a 500).
MAX_INT64 = 2**63 - 1
# The body of a download, in the OpenAPI document.
BINARY = {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
# Text that reaches a query: PostgreSQL refuses NUL in strings (a 500 if it got that far).
NO_NUL = r"^[^\x00]*$"


@router.post(
    "/experiments/{experiment_id}/runs",
    status_code=status.HTTP_201_CREATED,
    response_model=RunOut,
    responses=error_responses(400, 403, 404),  # 400: a body that is not even JSON text
)
def create_run(
    experiment: LaunchExperiment,
    session: SessionDep,
    user: CurrentUser,
    data: RunCreate | None = None,
) -> RunOut:
    data = data or RunCreate()
    run = service.create_run(
        session,
        experiment=experiment,
        owner=user,
        overrides=data.overrides,
        priority=data.priority,
    )
    return run_outs(session, [run])[0]


@router.get("/experiments/{experiment_id}/runs", response_model=list[RunOut], responses=OWNED)
def list_experiment_runs(experiment: OwnedExperiment, session: SessionDep) -> list[RunOut]:
    """The experiment's runs, each with at most 50 metric summaries (GET /api/runs/{id}: all)."""
    runs = service.runs_of_experiment(session, experiment_id=experiment.id)
    return run_outs(session, runs, listed=True)


@router.get("/runs/{run_id}", response_model=RunOut, responses=OWNED)
def read_run(run: OwnedRun, session: SessionDep) -> RunOut:
    """The run; while it is queued, `queue_reason` says why it waits."""
    return run_outs(session, [run])[0]


@router.post(
    "/runs/{run_id}/cancel",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=RunOut,
    responses=error_responses(403, 404, 409),  # 409: the run has already finished
)
def cancel_run(run: OwnedRun, session: SessionDep) -> RunOut:
    return run_outs(session, [service.request_cancel(session, run=run)])[0]


@router.post(
    "/runs/{run_id}/resume",
    status_code=status.HTTP_201_CREATED,
    response_model=RunOut,
    responses=error_responses(400, 403, 404, 409),  # 409: the checkpoint's file is gone
)
def resume_run(run: OwnedRun, data: RunResume, session: SessionDep, user: CurrentUser) -> RunOut:
    """A new run of the same experiment that continues from one checkpoint, with the parent's
    config plus `overrides` (validated as a whole; 422 names the field). A checkpoint that
    already reached `params.epochs` (final.pt) needs a higher `params.epochs` override."""
    new = service.resume_run(
        session, run=run, checkpoint=data.checkpoint, owner=user, overrides=data.overrides
    )
    return run_outs(session, [new])[0]


@router.get(
    "/runs/{run_id}/metrics",
    response_model=MetricsOut,
    response_model_exclude_none=True,
    responses=OWNED,
)
def read_metrics(
    run: OwnedRun,
    session: SessionDep,
    keys: Annotated[
        str | None, Query(pattern=NO_NUL, description="comma-separated metric keys")
    ] = None,
    max_points: Annotated[int | None, Query(ge=MIN_MAX_POINTS, le=1_000_000)] = None,
    step_min: Annotated[int | None, Query(ge=0, le=MAX_INT64)] = None,
    step_max: Annotated[int | None, Query(ge=0, le=MAX_INT64)] = None,
    with_time: Annotated[bool, Query(description="add each point's wall time")] = False,
) -> MetricsOut:
    wanted = [k for k in keys.split(",") if k] if keys else None
    series = read_series(
        session,
        run_id=run.id,
        keys=wanted,
        max_points=max_points,
        step_min=step_min,
        step_max=step_max,
        with_time=with_time,
        generation=run.attempt,
        growing=not RunStatus(run.status).finished,
    )
    return MetricsOut.model_validate({"series": series})


@router.get("/runs/{run_id}/logs", response_class=PlainTextResponse, responses=OWNED_NOT_JSON)
def read_logs(
    run: OwnedRun,
    offset: Annotated[int, Query(ge=0, le=MAX_INT64)] = 0,
    tail: Annotated[
        int | None, Query(ge=1, le=MAX_INT64, description="only the last this many bytes")
    ] = None,
    rank: Annotated[
        int | None, Query(ge=0, description="only this (global) rank's lines (whole lines)")
    ] = None,
    node: Annotated[
        int | None, Query(ge=0, le=MAX_INT64, description="a multi-node run's node (default 0)")
    ] = None,
) -> Response:
    """The output from `offset` (or its last `tail` bytes); X-Log-Size is where it ends.

    With `rank`, only that rank's whole lines in the same byte range, `tail` counting the
    bytes of those lines, and X-Log-Size the end of the last whole line (app/runs/files/logs.py).
    A multi-node run has one log per node, with its own offsets: `node` picks it (a `rank`
    alone picks the rank's node); without either, node 0's, the run's own.
    """
    resources = run_config(run.config).resources
    nodes, nproc = resources.nodes, resources.nproc
    chosen = logs.choose_node(nodes=nodes, nproc=nproc, node=node, rank=rank)
    source = logs.log_source(run.id, chosen)
    if rank is None or nodes * nproc == 1:  # a single process's lines are all rank 0's
        read = logs.read_all(source, offset=offset, tail=tail)
        text = logs.collapse_carriage_returns(b"".join(read.body)).decode("utf-8", "replace")
        return PlainTextResponse(text, headers={"X-Log-Size": str(read.end)})
    read = logs.read_rank(source, rank=rank, offset=offset, tail=tail)
    return StreamingResponse(
        (logs.collapse_carriage_returns(lines) for lines in read.body),  # whole lines
        media_type="text/plain; charset=utf-8",
        headers={"X-Log-Size": str(read.end)},
    )


@router.get("/runs/{run_id}/environment", response_model=dict[str, Any], responses=OWNED)
def read_environment(run: OwnedRun) -> dict[str, Any]:
    """The reproducibility record: python, torch, CUDA/cuDNN, packages, host, GPUs, seed and
    determinism flags, and for scripts the workspace's git commit and uncommitted diff.
    Empty until the run has started; the job's half arrives a moment after it starts."""
    return dict(run.environment or {})


@router.get("/runs/{run_id}/checkpoints", response_model=list[CheckpointOut], responses=OWNED)
def list_checkpoints(run: OwnedRun, session: SessionDep) -> list[CheckpointOut]:
    return [CheckpointOut.model_validate(c) for c in service.checkpoints_of(session, run_id=run.id)]


@router.get(
    "/runs/{run_id}/checkpoints/{name}",
    response_class=FileResponse,
    # 409: the file is still only on the worker's disk, on its way to the artifact store
    responses={
        200: {
            "description": "The checkpoint file (torch.load(f, weights_only=True))",
            "content": BINARY,
        },
        **error_responses(403, 404, 409),
    },
)
def download_checkpoint(
    run: OwnedRun, name: Annotated[str, PathParam(pattern=NO_NUL)], session: SessionDep
) -> Response:
    found = service.checkpoint_file(session, run=run, name=name)
    headers = {"Content-Disposition": attachment(name)}
    if found.size is not None:
        headers["Content-Length"] = str(found.size)
    return StreamingResponse(found.chunks, media_type="application/octet-stream", headers=headers)


def attachment(filename: str) -> str:
    quoted = quote(filename)
    if quoted == filename:
        return f'attachment; filename="{filename}"'
    return f"attachment; filename*=utf-8''{quoted}"


def _after_steps(
    after: Annotated[
        str | None,
        Query(
            description='JSON {"key": step}: per key, send only the points past that step '
            "(a page that has fetched the history); keys not named get every point"
        ),
    ] = None,
) -> dict[str, int]:
    # A dependency, so a bad value is a 422 before streaming.
    parsed = events.parse_after(after)
    if any(abs(step) > MAX_INT64 or "\x00" in key for key, step in parsed.items()):
        raise Invalid.at(
            ["query", "after"], f"steps must be within ±{MAX_INT64}, keys free of NUL", after
        )
    return parsed


def _last_event_id(
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            max_length=65536,
            description="the id of the last event received, to resume after a reconnect",
        ),
    ] = None,
) -> tuple[dict[str, int], int] | None:
    return events.parse_event_id(last_event_id) if last_event_id else None


async def _stream_slot(user: CurrentUser) -> AsyncIterator[int]:
    """One of the user's open-stream slots, held until the stream's response ends (a
    request-scoped dependency); 429 naming the limit when all are taken. Gives the user id."""
    with events.stream_slot(user.id, get_settings().sse_max_streams_per_user):
        yield user.id


@router.get(
    "/runs/{run_id}/events",
    response_class=EventSourceResponse,
    responses={**OWNED_NOT_JSON, **error_responses(429, non_json_route=True)},
)
async def run_events(
    request: Request,
    run: OwnedRun,
    user_id: Annotated[int, Depends(_stream_slot)],
    after: Annotated[dict[str, int], Depends(_after_steps)],
    log_offset: Annotated[
        int, Query(ge=0, le=MAX_INT64, description="log position the client has")
    ] = 0,
    resume_at: Annotated[tuple[dict[str, int], int] | None, Depends(_last_event_id)] = None,
) -> AsyncIterator[ServerSentEvent]:
    """New points, log text and status changes. Each metrics and log event carries an id; a
    client that reconnects with it as Last-Event-ID gets exactly what it missed (it wins over
    `after` and `log_offset`, which a page reconnecting by itself still sends)."""
    if resume_at is not None:
        after, log_offset = resume_at
    settings = get_settings()
    token = request_token(request)
    async for event in events.stream(
        run.id,
        settings.sse_poll_seconds,
        after=after,
        log_offset=log_offset,
        refusal=(lambda: token_refusal(token)) if token else None,
        recheck_seconds=settings.sse_auth_recheck_seconds,
        user_id=user_id,
    ):
        yield event


@router.get("/runs/{run_id}/files", response_model=list[RunFileOut], responses=OWNED)
def list_run_files(run: OwnedRun) -> list[RunFileOut]:
    """Every regular file the run wrote under its working directory (a script's ``model.pt``,
    a Lightning ``.ckpt``, a ``checkpoint-500/`` folder's files), checkpoints marked. The links
    that mirror the script's folder there are not the run's files and are left out. With the
    worker on another host, what it copied to the artifact store when the run ended."""
    return [RunFileOut.model_validate(f) for f in work_dir.run_files(run.id)]


@router.get(
    "/runs/{run_id}/files/{path:path}",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "The file; a folder comes as a gzipped tar of its regular files",
            "content": BINARY,
        },
        **error_responses(403, 404),  # 422 (a path refused) is FastAPI's own entry
    },
)
def download_run_file(run: OwnedRun, path: Annotated[str, PathParam(pattern=NO_NUL)]) -> Response:
    try:
        found = work_dir.download(run.id, path)
    except FileRefused as exc:
        raise Invalid.at(["path", "path"], str(exc), path) from None
    except FileNotFoundError:
        raise NotFound.of("file", path) from None
    headers = {"Content-Disposition": attachment(found.name)}
    if found.size is not None:
        headers["Content-Length"] = str(found.size)
    media = "application/gzip" if found.folder else "application/octet-stream"
    return StreamingResponse(found.chunks, media_type=media, headers=headers)
