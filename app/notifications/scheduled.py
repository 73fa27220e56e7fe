"""The notifications domain's periodic work (app.periodic), in the API and every worker: the
checks that record events no request causes (stalled runs, idle GPUs), and the delivery of the
outbox. Two jobs, so delivery never depends on the checks (nor imports them); a check that
records something wakes the delivery through the outbox (app.notifications.service.record)."""

from __future__ import annotations

from app.notifications.delivery import WAKE, deliver_round
from app.notifications.triggers import PeriodicChecks
from app.periodic import Process, declare

# One per process: the idle-GPU check remembers since when each leased GPU has been idle.
_checks = PeriodicChecks()

CHECKS = declare(
    "notifications.checks",
    _checks.run,
    every="notify_poll_seconds",
    runs_in={Process.API, Process.WORKER},
)
DELIVER = declare(
    "notifications.deliver",
    deliver_round,
    every="notify_poll_seconds",
    runs_in={Process.API, Process.WORKER},
    poke=WAKE,
)
