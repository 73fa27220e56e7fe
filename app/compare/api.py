"""GET /api/compare/metrics: one metric key (or a few) of many runs in one request, for the
pages that overlay them (compare, the experiment page's curves). A page of 100 runs asked
each run's series apart: 100 requests' authentication, session and run lookup before any
point was read. Every signed-in user reads every run (design: the team sees each other's
work); ids that are no run are left out."""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Query, Response
from pydantic import BaseModel
from sqlalchemy import select

from app.auth.deps import CurrentUser
from app.compare.views import parse_run_ids
from app.db import MAX_ID, SessionDep
from app.errors import Invalid
from app.metrics.downsample import MIN_MAX_POINTS
from app.metrics.overlay import read_overlay
from app.metrics.service import LiveRun
from app.runs.models import Run, RunStatus
from app.runs.schemas import SeriesOut

router = APIRouter(prefix="/api", tags=["runs"])
MAX_RUNS = 1000  # issue 43: 1,000 runs overlaid on one chart
MAX_KEYS = 50
NO_NUL = r"^[^\x00]*$"


class RunSeriesOut(BaseModel):
    status: str
    series: dict[str, SeriesOut]


class ManyRunsMetricsOut(BaseModel):
    runs: dict[int, RunSeriesOut]


@router.get("/compare/metrics", response_model=ManyRunsMetricsOut, response_model_exclude_none=True)
def read_many_runs_metrics(
    session: SessionDep,
    user: CurrentUser,
    runs: Annotated[str, Query(max_length=12000, pattern=NO_NUL, description="run ids: 1,2,3")],
    keys: Annotated[str, Query(max_length=20000, pattern=NO_NUL, description="comma-separated")],
    max_points: Annotated[int, Query(ge=MIN_MAX_POINTS, le=4000)] = 300,
    with_time: Annotated[bool, Query(description="add each point's wall time")] = False,
) -> Response:
    """The runs' downsampled series of `keys` (as GET /api/runs/{id}/metrics with
    max_points, from each series' overview: app.metrics.overlay), with each run's status (a
    page polls the active ones)."""
    ids = parse_run_ids([runs])
    wanted = [k for k in keys.split(",") if k]
    for loc, count, most in (("runs", len(ids), MAX_RUNS), ("keys", len(wanted), MAX_KEYS)):
        if count > most or any(i > MAX_ID for i in ids):
            ids_note = f", ids up to {MAX_ID}" if loc == "runs" else ""
            raise Invalid.at(["query", loc], f"at most {most}{ids_note}", count)
    order = {run_id: i for i, run_id in enumerate(ids)}  # ids.index per run: quadratic
    found = sorted(
        session.scalars(select(Run).where(Run.id.in_(ids))).all(), key=lambda r: order[r.id]
    )
    series = read_overlay(
        session,
        runs=[
            LiveRun(id=run.id, generation=run.attempt, growing=not RunStatus(run.status).finished)
            for run in found
        ],
        keys=wanted,
        max_points=max_points,
        with_time=with_time,
    )
    # ManyRunsMetricsOut's shape, serialized once by orjson: 200 runs x 150 points x 3 lists
    # (~1 MB) spent ~3x read_overlay's time in FastAPI's dump, validation and json.dumps.
    body = {"runs": {str(r.id): {"status": r.status, "series": series[r.id]} for r in found}}
    return Response(orjson.dumps(body), media_type="application/json")
