"""Where the worker's forwarder is in the files a job writes, kept on the run: the metrics
spool (``runs.metrics_offset``) and each TensorBoard event file (``runs.tb_offsets``, by path
under the run directory); output.log's is the log store's (app.runs.files.log_store). Written here
only, in the same transaction as what was read up to there, so a restarted worker resumes
instead of replaying. What a batch kept out (lines skipped, points past the key limit) is
counted on the run in that transaction too (app.runs.state.notices), so a replayed batch is not
counted twice.

Every function takes the caller's session and flushes at most.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.orm import Session

from app.runs.models import Run
from app.runs.state import notices


def metrics_offset(session: Session, *, run_id: int) -> int | None:
    """The byte offset in metrics.jsonl the next read starts at; None for no such run. Loads
    the run into the session, so the calls after it in the batch do not query it again."""
    run = session.get(Run, run_id)
    return None if run is None else run.metrics_offset


def advance_metrics(
    session: Session, *, run_id: int, offset: int, skipped: Mapping[str, int]
) -> None:
    """The spool was read up to ``offset``; ``skipped``: its lines left out, by reason."""
    run = session.get(Run, run_id)
    if run is None:
        return
    notices.add_skipped(run, skipped)
    run.metrics_offset = offset
    session.flush()


def note_config_differs(
    session: Session, *, run_id: int, differing: Mapping[str, tuple[Any, Any]]
) -> None:
    """The script's init(config=...) and the launch disagree on these keys (the launch's won)."""
    run = session.get(Run, run_id)
    if run is not None and differing:
        notices.add_config_differs(run, differing)
        session.flush()


def note_dropped_points(session: Session, *, run_id: int, limit: int, points: int) -> None:
    """``points`` points of keys past the run's key limit (``limit``) were not stored."""
    run = session.get(Run, run_id)
    if run is not None:
        notices.add_dropped_points(run, limit=limit, points=points)
        session.flush()


def note_tensorboard(session: Session, *, run_id: int, notes: Mapping[str, str]) -> dict[str, str]:
    """What the run's event files hold that is not shown, said on the run (app.runs.state.notices);
    returns the notes new to the run."""
    run = session.get(Run, run_id)
    if run is None or not notes:
        return {}
    new = notices.add_tensorboard_notes(run, notes)
    session.flush()
    return new


def tensorboard_offsets(session: Session, *, run_id: int) -> dict[str, int] | None:
    """Bytes read of each event file, by path under the run directory ({} before the first);
    None for no such run."""
    run = session.get(Run, run_id)
    return None if run is None else dict(run.tb_offsets or {})


def advance_tensorboard(session: Session, *, run_id: int, offsets: Mapping[str, int]) -> None:
    run = session.get(Run, run_id)
    if run is not None:
        run.tb_offsets = dict(offsets)  # a new dict: the JSON column sees the change
        session.flush()


def rewind_spool(session: Session, *, run_id: int) -> None:
    """The spool is read again from its start: an attempt re-adopted after a requeue dropped
    its points past the checkpoint (app.runs.state.recovery.readopt). Points stored already are
    kept as they are (unique per key and step), the dropped ones come back from the spool."""
    run = session.get(Run, run_id)
    if run is not None:
        run.metrics_offset = 0
        session.flush()


def restart(session: Session, *, run_id: int, tensorboard: Mapping[str, int]) -> None:
    """A new attempt of the run: its spool starts over (the old one is set aside), and the
    event files are taken as read up to ``tensorboard`` (their sizes now): what the last
    attempt left unread is superseded (worker.spool)."""
    run = session.get(Run, run_id)
    if run is not None:
        run.metrics_offset = 0
        run.tb_offsets = dict(tensorboard)
        session.flush()
