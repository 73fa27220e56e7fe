"""Where a requeued run's next attempt picks up its spool: the run's side of
worker.spool.start_attempt. The old attempt's unread metrics lines and TensorBoard events are
superseded (app.runs.state.recovery dropped the points past the checkpoint the run resumes from),
so reading starts over at a new spool and at the event files' current ends; the log goes on
after what was shipped so far."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.runs.files import ingest_offsets
from app.runs.models import Run


@dataclass(frozen=True)
class NextAttempt:
    """The attempt starting now, and how much of the run's log the earlier ones shipped."""

    attempt: int
    log_offset: int


def restart_spool(
    session: Session, *, run_id: int, tb_offsets: dict[str, int]
) -> NextAttempt | None:
    """Reading of the new attempt's spool starts at 0 and of each event file at `tb_offsets`
    (path relative to the run's folder -> bytes already there); None when the run is gone."""
    run = session.get(Run, run_id, populate_existing=True)
    if run is None:
        return None
    ingest_offsets.restart(session, run_id=run_id, tensorboard=tb_offsets)
    return NextAttempt(attempt=run.attempt, log_offset=run.log_offset)
