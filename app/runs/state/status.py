"""A run's status values, apart from the ORM model so that code which only reads or reports a
status (the host agent, the API's schemas) needs no table to name one. Only
app.runs.state.lifecycle changes a run's status."""

from __future__ import annotations

import enum


class RunStatus(enum.StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (RunStatus.succeeded, RunStatus.failed, RunStatus.cancelled)
