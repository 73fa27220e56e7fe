"""The runs domain's periodic work (app.periodic): the reaper, in the API and every worker,
so that a box whose only worker died still notices its lost runs."""

from __future__ import annotations

from app.periodic import Process, declare
from app.runs.reaper import reap_once

REAP = declare(
    "runs.reap", reap_once, every="reap_interval_seconds", runs_in={Process.API, Process.WORKER}
)
