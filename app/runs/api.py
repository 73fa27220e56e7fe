from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Query, status
from fastapi.responses import FileResponse, PlainTextResponse, Response, StreamingResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent

from app.auth.deps import CurrentUser
from app.db import SessionDep
from app.errors import validation_error
from app.metrics.service import read_series
from app.ownership import OwnedExperiment, OwnedRun
from app.runs import events, logs, service
from app.runs.logs import run_nproc
from app.runs.schemas import CheckpointOut, MetricsOut, RunCreate, RunOut, RunResume
from app.settings import get_settings

router = APIRouter(prefix="/api", tags=["runs"])


@router.post(
    "/experiments/{experiment_id}/runs",
    status_code=status.HTTP_201_CREATED,
    response_model=RunOut,
)
def create_run(
    experiment: OwnedExperiment,
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
    return RunOut.model_validate(run)


@router.get("/experiments/{experiment_id}/runs", response_model=list[RunOut])
def list_experiment_runs(experiment: OwnedExperiment, session: SessionDep) -> list[RunOut]:
    runs = service.runs_of_experiment(session, experiment_id=experiment.id)
    return [RunOut.model_validate(r) for r in runs]


@router.get("/runs", response_model=list[RunOut])
def list_runs(session: SessionDep, user: CurrentUser) -> list[RunOut]:
    return [RunOut.model_validate(r) for r in service.visible_runs(session, user=user)]


@router.get("/runs/{run_id}", response_model=RunOut)
def read_run(run: OwnedRun) -> RunOut:
    return RunOut.model_validate(run)


@router.post("/runs/{run_id}/cancel", status_code=status.HTTP_202_ACCEPTED, response_model=RunOut)
def cancel_run(run: OwnedRun, session: SessionDep) -> RunOut:
    return RunOut.model_validate(service.request_cancel(session, run=run))


@router.post("/runs/{run_id}/resume", status_code=status.HTTP_201_CREATED, response_model=RunOut)
def resume_run(run: OwnedRun, data: RunResume, session: SessionDep, user: CurrentUser) -> RunOut:
    """A new run of the same experiment and config that continues from one checkpoint."""
    new = service.resume_run(session, run=run, checkpoint=data.checkpoint, owner=user)
    return RunOut.model_validate(new)


@router.get("/runs/{run_id}/metrics", response_model=MetricsOut, response_model_exclude_none=True)
def read_metrics(
    run: OwnedRun,
    session: SessionDep,
    keys: Annotated[str | None, Query(description="comma-separated metric keys")] = None,
    max_points: Annotated[int | None, Query(ge=2, le=1_000_000)] = None,
    step_min: Annotated[int | None, Query(ge=0)] = None,
    step_max: Annotated[int | None, Query(ge=0)] = None,
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
    )
    return MetricsOut.model_validate({"series": series})


@router.get("/runs/{run_id}/logs", response_class=PlainTextResponse)
def read_logs(
    run: OwnedRun,
    offset: Annotated[int, Query(ge=0)] = 0,
    tail: Annotated[int | None, Query(ge=1, description="only the last this many bytes")] = None,
    rank: Annotated[
        int | None, Query(ge=0, description="only this rank's lines (whole lines)")
    ] = None,
) -> Response:
    """The output from `offset` (or its last `tail` bytes); X-Log-Size is where it ends.

    With `rank`, only that rank's whole lines in the same byte range, `tail` counting the
    bytes of those lines, and X-Log-Size the end of the last whole line (app/runs/logs.py).
    """
    path = service.log_path(run.id)
    nproc = run_nproc(run.config)
    if rank is not None and rank >= nproc:
        raise validation_error(
            [
                {
                    "type": "less_than",
                    "loc": ["query", "rank"],
                    "msg": f"the run has {nproc} process(es): rank must be below {nproc}",
                    "input": rank,
                }
            ]
        )
    if rank is None or nproc == 1:  # a single process's lines are all rank 0's
        read = logs.read_all(path, offset=offset, tail=tail)
        text = b"".join(read.body).decode("utf-8", "replace")
        return PlainTextResponse(text, headers={"X-Log-Size": str(read.end)})
    read = logs.read_rank(path, rank=rank, offset=offset, tail=tail)
    return StreamingResponse(
        read.body, media_type="text/plain; charset=utf-8", headers={"X-Log-Size": str(read.end)}
    )


@router.get("/runs/{run_id}/checkpoints", response_model=list[CheckpointOut])
def list_checkpoints(run: OwnedRun, session: SessionDep) -> list[CheckpointOut]:
    return [CheckpointOut.model_validate(c) for c in service.checkpoints_of(session, run_id=run.id)]


@router.get("/runs/{run_id}/checkpoints/{name}", response_class=FileResponse)
def download_checkpoint(run: OwnedRun, name: str, session: SessionDep) -> FileResponse:
    path = service.checkpoint_file(session, run=run, name=name)
    return FileResponse(path, filename=name, media_type="application/octet-stream")


def _after_steps(
    after: Annotated[
        str | None,
        Query(
            description='JSON {"key": step}: per key, send only the points past that step '
            "(a page that has fetched the history); keys not named get every point"
        ),
    ] = None,
) -> dict[str, int]:
    return events.parse_after(after)  # a dependency, so a bad value is a 422 before streaming


@router.get("/runs/{run_id}/events", response_class=EventSourceResponse)
async def run_events(
    run: OwnedRun,
    after: Annotated[dict[str, int], Depends(_after_steps)],
    log_offset: Annotated[int, Query(ge=0, description="log position the client has")] = 0,
) -> AsyncIterator[ServerSentEvent]:
    interval = get_settings().sse_poll_seconds
    async for event in events.stream(run.id, interval, after=after, log_offset=log_offset):
        yield event
