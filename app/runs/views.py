"""HTML pages of this domain: the run page (live curves, logs, checkpoints, cancel, resume)."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.code.service import code_view
from app.db import SessionDep
from app.experiments.config.model import run_config
from app.experiments.models import Experiment
from app.metrics.cpu_share import cpu_shares
from app.ownership import find_run
from app.pages import PageRoute, PageUser
from app.runs.files.disk import disk_by_run
from app.runs.service import estimates_many, resumed_from, tags_by_run, why_queued
from app.runs.state.notices import notice_lines
from app.runs.state.phase import phase_of
from app.templating import render

router = APIRouter(include_in_schema=False, route_class=PageRoute)


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: int, session: SessionDep, user: PageUser) -> HTMLResponse:
    run = find_run(run_id, session, user, write=False)  # the API's 404; PageRoute renders it
    experiment = session.get(Experiment, run.experiment_id)
    config_json = json.dumps(run.config, indent=2, sort_keys=True, ensure_ascii=False)
    return render(
        request,
        "run.html",
        user=user,
        run=run,
        experiment=experiment,
        may_write=user.may_write(run.owner_id),
        notices=notice_lines(run.notices),
        tags=tags_by_run(session, [run.id])[run.id],
        disk_bytes=disk_by_run(session, [run.id]).get(run.id, 0),
        queue_reason=why_queued(session, run=run),
        estimate=estimates_many(session, runs=[run]).get(run.id),
        cpu_share=cpu_shares(session, [run.id]).get(run.id) if run.status == "running" else None,
        phase=phase_of(run),
        parent=resumed_from(session, run=run),
        config_json=config_json,
        run_spec=run_config(run.config).run_spec(),  # its defaults from the config model
        code=code_view(session, run),
        may_launch=experiment is not None and user.may_write(experiment.owner_id),
    )
