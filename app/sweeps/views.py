"""The sweep page, GET /sweeps/{id}: progress, the best run so far, the trials' runs in THE
runs table (templates/_runs_table.html, app/static/experiment_runs.js, filtered by sweep_id;
the runs stopped early marked), a parallel-coordinates chart and one metric-vs-param scatter
per param.

The page starts from the same SweepOut as GET /api/sweeps/{id} (in the page as JSON, so it
draws at once), then app/static/sweep.js polls that endpoint every 3 s while it is running.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy import select

from app.auth.models import User
from app.db import MAX_ID, SessionDep
from app.errors import NotFound
from app.experiments.models import Experiment
from app.pages import PageRoute, PageUser
from app.runs.models import RunStatus
from app.sweeps.models import Sweep
from app.sweeps.out import sweep_out
from app.templating import render

router = APIRouter(include_in_schema=False, route_class=PageRoute)


@router.get("/sweeps/{sweep_id}", response_class=HTMLResponse)
def sweep_page(
    request: Request, sweep_id: int, session: SessionDep, user: PageUser
) -> HTMLResponse:
    sweep = session.get(Sweep, sweep_id) if 0 < sweep_id <= MAX_ID else None
    if sweep is None:
        raise NotFound.of("sweep", sweep_id)
    experiment = session.get(Experiment, sweep.experiment_id)
    out = sweep_out(session, sweep)
    owner_ids = {r.owner_id for r in out.runs} | {sweep.owner_id}
    names = session.execute(select(User.id, User.username).where(User.id.in_(owner_ids)))
    return render(
        request,
        "sweep.html",
        user=user,
        sweep=sweep,
        experiment=experiment,
        data=out.model_dump(mode="json"),
        may_cancel=user.may_write(sweep.owner_id),
        # The runs table's rows before its script lists them (newest first, as it does), who
        # launched each (the API gives owner ids) and the statuses its filter offers.
        runs=sorted(out.runs, key=lambda r: r.id, reverse=True),
        owners={str(uid): name for uid, name in names},
        statuses=[s.value for s in RunStatus],
    )
