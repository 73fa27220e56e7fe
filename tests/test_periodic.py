"""app.periodic: one meaning for every interval, a round at start, errors retried, wake-ups;
driven by an injected wait (no clock, no sleeps) or by real threads waited on by condition."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from app.periodic import Job, Process, Runner, declare, for_process, run_rounds, wake
from app.scheduled import JOBS
from app.settings import Settings

WAIT_S = 30.0  # the longest a test waits for a thread's condition (met at once when right)


def job(
    run: Callable[[], object], name: str = "test.job", every: str = "notify_poll_seconds"
) -> Job:
    return declare(name, run, every=every, runs_in={Process.API})


class Waits:
    """An injected wait: records each wait's interval, ends the loop after ``rounds`` waits."""

    def __init__(self, stop: threading.Event, rounds: int) -> None:
        self.stop, self.rounds = stop, rounds
        self.asked: list[float] = []

    def __call__(self, _event: threading.Event, timeout: float) -> bool:
        self.asked.append(timeout)
        if len(self.asked) >= self.rounds:
            self.stop.set()
        return False


@pytest.mark.parametrize("interval", [0.0, -1.0])
def test_an_interval_of_zero_or_less_disables_the_job_even_at_start(interval: float) -> None:
    ran: list[int] = []
    stop = threading.Event()
    waits = Waits(stop, rounds=1)
    assert run_rounds(job(lambda: ran.append(1)), interval, stop, waits) == 0
    assert ran == [] and waits.asked == []


def test_the_first_round_is_at_start_then_one_per_interval() -> None:
    ran: list[int] = []
    stop = threading.Event()
    waits = Waits(stop, rounds=3)
    assert run_rounds(job(lambda: ran.append(len(waits.asked))), 7.5, stop, waits) == 3
    assert ran == [0, 1, 2]  # the first before any wait
    assert waits.asked == [7.5, 7.5, 7.5]


def test_a_failing_round_is_logged_and_the_next_round_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []

    def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("database away")

    stop = threading.Event()
    assert run_rounds(job(flaky, name="test.flaky"), 1.0, stop, Waits(stop, rounds=2)) == 2
    assert len(calls) == 2
    assert "periodic job test.flaky failed" in caplog.text and "database away" in caplog.text


def test_a_stopped_runner_runs_no_round() -> None:
    stop = threading.Event()
    stop.set()
    ran: list[int] = []
    assert run_rounds(job(lambda: ran.append(1)), 1.0, stop, Waits(stop, rounds=1)) == 0
    assert ran == []


def test_an_unknown_setting_is_refused_at_declaration() -> None:
    with pytest.raises(ValueError, match="no setting 'no_such_seconds'"):
        declare("test.bad", lambda: None, every="no_such_seconds", runs_in={Process.API})


def test_a_job_reads_its_interval_from_its_setting_or_function() -> None:
    settings = Settings(notify_poll_seconds=2.5, lease_ttl_seconds=9.0)
    assert job(lambda: None).interval(settings) == 2.5
    derived = declare(
        "test.derived", lambda: None, every=lambda s: s.lease_ttl_seconds / 3, runs_in=[]
    )
    assert derived.interval(settings) == 3.0


def test_wake_starts_the_next_round_at_once_and_stop_ends_the_thread() -> None:
    """Real threads, an hour's interval: only wake() can start the second round."""
    rounds = threading.Semaphore(0)
    hourly = declare("test.hourly", rounds.release, every="sweep_advance_seconds", runs_in=[])
    off = declare("test.off", rounds.release, every="reap_interval_seconds", runs_in=[])
    settings = Settings(sweep_advance_seconds=3600.0, reap_interval_seconds=0.0)
    runner = Runner([hourly, off], settings=settings).start()
    try:
        assert [t.name for t in runner.threads] == ["periodic:test.hourly"]  # the other is off
        assert rounds.acquire(timeout=WAIT_S)  # the round at start
        wake("test.hourly")
        assert rounds.acquire(timeout=WAIT_S)  # woken long before the hour
    finally:
        runner.stop(timeout=WAIT_S)
    assert not any(t.is_alive() for t in runner.threads)


def test_each_process_kind_runs_its_declared_jobs() -> None:
    from worker.scheduled import HOST_HEARTBEAT, heartbeat_interval

    api = {j.name for j in for_process(Process.API, JOBS)}
    assert api == {
        "runs.reap",
        "runs.resend_lost",
        "notifications.checks",
        "notifications.deliver",
        "sweeps.advance",
        "auth.token_use",
        "sessions.limits",
    }
    worker = {j.name for j in for_process(Process.WORKER, (HOST_HEARTBEAT, *JOBS))}
    # Token use is noted by the API's token check only: the API writes it. A session's limits
    # are read through its lab's socket, which the API proxies (app/sessions/end_rules.py).
    assert worker == api - {"auth.token_use", "sessions.limits"} | {"worker.host_heartbeat"}
    assert heartbeat_interval(Settings(lease_ttl_seconds=15.0)) == 5.0
    assert heartbeat_interval(Settings(lease_ttl_seconds=0.3, run_heartbeat_seconds=0.1)) == 0.5
