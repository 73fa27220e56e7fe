"""A session's end rules (app/sessions/end_rules.verdict): the warning before its time limit, the
end at it, idleness only with JupyterLab idle and the GPUs idle, an extension moving the end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.runs.models import Run, RunStatus
from app.sessions.end_rules import verdict

START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def session_run(hours: float = 1, notices: dict | None = None) -> Run:
    return Run(
        config={"session": {"hours": hours}},
        status=RunStatus.running,
        started_at=START.replace(tzinfo=None),  # as SQLite gives it back
        notices=notices,
    )


def test_warned_then_ended_at_its_time_limit() -> None:
    run = session_run()
    busy = START + timedelta(minutes=45)
    assert verdict(run, now=busy, last_activity=busy, idle_gpus=False).warn is None
    late = START + timedelta(minutes=51)
    found = verdict(run, now=late, last_activity=late, idle_gpus=False)
    assert found.warn and "13:00" in found.warn and found.end is None
    warned = session_run(notices={"session": {"warning": found.warn}})
    assert verdict(warned, now=late, last_activity=late, idle_gpus=False).warn is None
    over = verdict(run, now=START + timedelta(hours=1), last_activity=late, idle_gpus=False)
    assert over.end and "time limit" in over.end


def test_an_extension_moves_the_end() -> None:
    run = session_run(notices={"session": {"extra_hours": 1}})
    later = START + timedelta(hours=1, minutes=5)
    assert verdict(run, now=later, last_activity=later, idle_gpus=False).end is None


def test_idle_needs_both_jupyter_and_the_gpus_idle() -> None:
    run = session_run(hours=10)
    now = START + timedelta(hours=2)
    quiet = START + timedelta(minutes=30)  # 90 minutes without activity (default limit 60)
    ended = verdict(run, now=now, last_activity=quiet, idle_gpus=True).end
    assert ended and "idle" in ended
    assert verdict(run, now=now, last_activity=quiet, idle_gpus=False).end is None
    assert verdict(run, now=now, last_activity=now, idle_gpus=True).end is None
    # A JupyterLab that does not answer is not called idle.
    assert verdict(run, now=now, last_activity=None, idle_gpus=True).end is None
