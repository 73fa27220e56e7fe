"""The words of the lifecycle's answers (app/runs/state/lifecycle.py): what a check-in and a
cancel say, and the reaper's reason for a lost worker. Apart from the transitions so that the
worker's loops, the nodes and the tests name them without the module that writes runs."""

from __future__ import annotations

import enum

# A reaper's reason for a run whose worker stopped heartbeating (app.runs.state.recovery): a guess,
# which the attempt's job, if its worker comes back with its exit status, overrules (settle).
WORKER_LOST = "worker lost"


class Standing(enum.Enum):
    """A worker's check-in answer about the attempt it trains (check_in)."""

    OWNED = "owned"  # still running as this attempt: train on
    CANCEL_REQUESTED = "cancel requested"  # its cancel was asked for: stop the job
    DELETED = "deleted"  # the run is gone: nothing to train for
    NOT_OWNED = "not owned"  # handed over (requeued, failed, finished): not this attempt's


class CancelOutcome(enum.Enum):
    CANCELLED = "cancelled"  # it was queued: cancelled here and now
    REQUESTED = "requested"  # it is running: its worker stops the job, then finishes it
    FINISHED = "finished"  # it had already ended: nothing to cancel
