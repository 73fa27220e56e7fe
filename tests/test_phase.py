"""A run's phase and its build's time apart from its training's (app/runs/state/phase.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from app.runs.state.phase import BUILDING, STARTING, TRAINING, phase_of

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def run(status: str, build: int | None, training: int | None, finished: int | None) -> object:
    def at(seconds: int | None) -> datetime | None:
        return None if seconds is None else (T0 + timedelta(seconds=seconds)).replace(tzinfo=None)

    return SimpleNamespace(  # naive, as SQLite hands timestamps back
        status=status,
        env_build_started_at=at(build),
        training_started_at=at(training),
        finished_at=at(finished),
    )


def test_a_run_with_packages_starts_builds_then_trains() -> None:
    now = T0 + timedelta(seconds=50)
    starting = phase_of(run("running", None, None, None), now)
    assert (starting.phase, starting.env_build_seconds, starting.duration_seconds) == (
        STARTING,
        None,
        None,
    )
    building = phase_of(run("running", 2, None, None), now)
    assert (building.phase, building.env_build_seconds, building.duration_seconds) == (
        BUILDING,
        48.0,
        None,
    )
    training = phase_of(run("running", 2, 47, None), now)
    assert (training.phase, training.env_build_seconds, training.duration_seconds) == (
        TRAINING,
        45.0,
        3.0,
    )


def test_the_duration_of_a_finished_run_counts_from_its_training_only() -> None:
    done = phase_of(run("succeeded", 1, 46, 106))
    assert (done.phase, done.env_build_seconds, done.duration_seconds) == (None, 45.0, 60.0)


def test_a_failed_build_took_until_the_run_ended_and_never_trained() -> None:
    failed = phase_of(run("failed", 1, None, 31))
    assert (failed.phase, failed.env_build_seconds, failed.duration_seconds) == (None, 30.0, None)


def test_a_run_without_packages_has_no_build() -> None:
    plain = phase_of(run("succeeded", None, 0, 12))
    assert (plain.env_build_seconds, plain.duration_seconds) == (None, 12.0)
