"""The runs domain's periodic work (app.periodic): the reaper, in the API and every worker,
so that a box whose only worker died still notices its lost runs; and the queue's
reconciliation (app.runs.state.dispatch), a few times per queue_resend_seconds, in the same
processes (a run is re-sent once however many of them look)."""

from __future__ import annotations

from app.periodic import Process, declare
from app.runs.state.dispatch import resend_lost
from app.runs.state.reaper import reap_once
from app.settings import Settings

REAP = declare(
    "runs.reap", reap_once, every="reap_interval_seconds", runs_in={Process.API, Process.WORKER}
)


def resend_interval(settings: Settings) -> float:
    """A lost message is re-sent at most a third of queue_resend_seconds late (<= 0: off)."""
    return settings.queue_resend_seconds / 3


RESEND = declare(
    "runs.resend_lost", resend_lost, every=resend_interval, runs_in={Process.API, Process.WORKER}
)
