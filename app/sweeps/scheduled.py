"""The sweeps domain's periodic work (app.periodic): the safety net that re-advances every
running sweep, in the API and every worker (at start, then every sweep_advance_seconds): an
advance lost with a crashed worker, or a sweep whose trials ended while none was up."""

from __future__ import annotations

from app.periodic import Process, declare
from app.sweeps.driver import advance_running_sweeps

ADVANCE = declare(
    "sweeps.advance",
    advance_running_sweeps,
    every="sweep_advance_seconds",
    runs_in={Process.API, Process.WORKER},
)
