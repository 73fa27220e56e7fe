"""Notifications from trigger to receiver, in-process: a run's end, a NaN in the spool, a
stalled run and an idle GPU each put a message in the outbox in the transaction that saw it
(nothing is sent before the commit), once per run; the delivery round sends it to a local
HTTP receiver and a local SMTP server, retries a receiver answering 500 with backoff, and
gives up on a destination it refuses."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import datetime, timedelta
from email.message import Message

import pytest
from sqlalchemy import select, update

from app.db import session_scope
from app.gpus.models import GpuLease
from app.gpus.service import touch_host
from app.metrics.ingest import ingest_points
from app.notifications import service
from app.notifications.delivery import deliver_due
from app.notifications.models import Delivery, NotificationSettings
from app.notifications.schemas import NotificationSettingsIn
from app.notifications.triggers import PeriodicChecks, check_stalled
from app.runs.models import Run, RunStatus
from app.runs.state import lifecycle
from app.runs.state.answers import WORKER_LOST
from app.settings import get_settings
from app.timeutil import utcnow
from tests.conftest import make_user
from tests.factories import add_run
from tests.notify_receivers import SmtpReceiver, smtp_receiver, wait_until, webhook_receiver
from tests.test_gpu_panel import fake_nvml
from worker.forwarder import forward
from worker.gpus import read_gpu_stats


@pytest.fixture
def smtp(monkeypatch: pytest.MonkeyPatch) -> Iterator[SmtpReceiver]:
    with smtp_receiver() as receiver:
        settings = get_settings()
        monkeypatch.setattr(settings, "smtp_host", receiver.host)
        monkeypatch.setattr(settings, "smtp_port", receiver.port)
        monkeypatch.setattr(settings, "notify_webhook_allow_networks", "127.0.0.1/32")
        monkeypatch.setattr(settings, "notify_retry_seconds", 0.0)
        yield receiver


def subscriber(*, webhook: str | None = None, email: str | None = None, **kw: object) -> int:
    """A new user with these settings; returns the id."""
    username = make_user()[0]
    with session_scope() as session:
        from app.auth.models import User

        user = session.scalars(select(User).where(User.username == username)).one()
        data = NotificationSettingsIn.model_validate({"webhook_url": webhook, "email": email, **kw})
        service.save(session, user=user, data=data)
        return user.id


def running_run(owner_id: int, *, started_ago: float = 0) -> int:
    with session_scope() as session:
        run_id = add_run(session, owner_id=owner_id, status="running")
        run = session.get(Run, run_id)
        assert run is not None
        run.started_at = utcnow() - timedelta(seconds=started_ago)
        run.name = "lr <!channel> sweep"
        return run_id


def text_of(mail: Message) -> str:
    return bytes(mail.get_payload(decode=True)).decode()


def deliveries(run_id: int) -> list[Delivery]:
    with session_scope() as session:
        return list(session.scalars(select(Delivery).where(Delivery.run_id == run_id)))


def deliver_all(timeout: float = 30) -> None:
    def done() -> bool:
        deliver_due()
        with session_scope() as session:
            return not session.scalars(
                select(Delivery.id).where(Delivery.status.in_(["pending", "sending"]))
            ).first()

    wait_until(done, timeout, "every delivery to end")


def test_a_failed_run_is_told_to_both_channels_and_a_500_is_retried(smtp) -> None:
    with webhook_receiver(fail_first=2) as hook:
        owner = subscriber(webhook=hook.url, email="owner@example.com")
        run_id = running_run(owner)
        with session_scope() as session:
            error = "Traceback (most recent call last):\n  ...\nValueError: <b>boom</b>"
            assert lifecycle.finish(
                session, run_id=run_id, attempt=1, status=RunStatus.failed, exit_code=1, error=error
            )
            # In the outbox, in the run's own transaction; nothing has gone out yet.
            assert len(session.scalars(select(Delivery).where(Delivery.run_id == run_id)).all())
            assert hook.requests == []
        deliver_all()
        assert len(hook.requests) == 3  # 500, 500, then 200
        [body] = hook.bodies
    assert body["event"] == "failed" and body["run"]["id"] == run_id
    assert body["run"]["error"] == "ValueError: <b>boom</b>"
    # Slack-escaped: a name or error cannot ping the channel or inject markup.
    assert "&lt;!channel&gt;" in body["text"] and "&lt;b&gt;boom" in body["text"], body["text"]
    [mail] = smtp.messages
    assert mail["Subject"] == f"[torchyard] run {run_id} (lr <!channel> sweep) failed"
    assert "ValueError: <b>boom</b>" in text_of(mail)
    rows = {d.channel.value: d for d in deliveries(run_id)}
    assert (rows["webhook"].attempts, rows["webhook"].status.value) == (3, "delivered")
    assert rows["webhook"].last_error is None and rows["email"].attempts == 1


def test_a_receiver_that_keeps_failing_is_given_up_after_the_last_attempt(
    smtp, monkeypatch
) -> None:
    monkeypatch.setattr(get_settings(), "notify_max_attempts", 3)
    with webhook_receiver(fail_first=100) as hook:
        run_id = running_run(subscriber(webhook=hook.url, events=["succeeded"]))
        with session_scope() as session:
            lifecycle.finish(
                session, run_id=run_id, attempt=1, status=RunStatus.succeeded, exit_code=0,
                error=None,
            )  # fmt: skip
        deliver_all()
        assert len(hook.requests) == 3
    [row] = deliveries(run_id)
    assert (row.status.value, row.attempts, row.last_error) == ("failed", 3, "HTTP 500: boom")


def test_backoff_waits_before_the_next_attempt(smtp, monkeypatch) -> None:
    monkeypatch.setattr(get_settings(), "notify_retry_seconds", 3600.0)
    with webhook_receiver(fail_first=1) as hook:
        run_id = running_run(subscriber(webhook=hook.url))
        with session_scope() as session:
            lifecycle.fail(session, run_id=run_id, attempt=1, reason="worker error: gone")
        deliver_due()
        deliver_due()
        assert len(hook.requests) == 1  # the second attempt is an hour away
    [row] = deliveries(run_id)
    assert row.status.value == "pending" and row.attempts == 1
    assert row.next_attempt_at.timestamp() > utcnow().timestamp() + 3500
    with session_scope() as session:
        session.delete(session.get(Run, run_id))  # its deliveries go with it


def test_a_destination_no_longer_allowed_is_refused_at_once(smtp, monkeypatch) -> None:
    with webhook_receiver() as hook:
        run_id = running_run(subscriber(webhook=hook.url))  # saved while 127.0.0.1 was allowed
        monkeypatch.setattr(get_settings(), "notify_webhook_allow_networks", "")
        with session_scope() as session:
            lifecycle.cancel(session, run_id=run_id)
            lifecycle.finish(
                session, run_id=run_id, attempt=1, status=RunStatus.cancelled, exit_code=None,
                error=None,
            )  # fmt: skip
        deliver_all()
        assert hook.requests == []
    [row] = deliveries(run_id)
    assert row.event.value == "cancelled" and (row.status.value, row.attempts) == ("failed", 1)
    assert "not a public address" in (row.last_error or "")


def test_a_queued_run_cancelled_is_told_and_unsubscribed_events_are_not(smtp) -> None:
    owner = subscriber(email="me@example.com", events=["cancelled"])
    with session_scope() as session:
        queued = add_run(session, owner_id=owner)
    with session_scope() as session:
        lifecycle.cancel(session, run_id=queued)
    assert [d.event.value for d in deliveries(queued)] == ["cancelled"]
    other = running_run(owner)
    with session_scope() as session:
        lifecycle.finish(
            session, run_id=other, attempt=1, status=RunStatus.succeeded, exit_code=0, error=None
        )
    assert deliveries(other) == []  # succeeded is not among the user's events
    deliver_all()
    assert smtp.subjects()[-1] == f"[torchyard] run {queued} was cancelled"


def spool(run_id: int, *lines: str) -> int:
    path = get_settings().run_dir(run_id) / "metrics.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.writelines(line + "\n" for line in lines)
    with session_scope() as session:
        return forward(session, run_id=run_id, metrics_path=path)


def line(step: int, values: str) -> str:
    return f'{{"type": "metrics", "step": {step}, "time": 1.5, "values": {values}}}'


def test_a_nan_in_the_spool_is_told_once_per_key(smtp) -> None:
    run_id = running_run(subscriber(email="me@example.com"))
    spool(run_id, line(1, '{"loss": 1.0, "acc": 0.5}'))
    assert deliveries(run_id) == []
    spool(run_id, line(2, '{"loss": null, "acc": 0.5}'), line(3, '{"loss": NaN, "lr": Infinity}'))
    [row] = deliveries(run_id)
    assert row.payload["keys"] == ["loss", "lr"] and row.payload["step"] == 2
    spool(run_id, line(4, '{"loss": null, "lr": null}'))  # the same keys again: nothing new
    assert len(deliveries(run_id)) == 1
    spool(run_id, line(5, '{"acc": -Infinity}'))
    assert sorted(d.detail for d in deliveries(run_id)) == ["acc", "loss"]
    deliver_all()
    assert smtp.subjects()[-2:] == [f"[torchyard] run {run_id} (lr <!channel> sweep) metric "
                                    "became NaN/inf"] * 2  # fmt: skip
    assert "at step 2: loss, lr" in text_of(smtp.messages[-2])


def test_an_infinity_as_the_job_writes_it_is_told_as_a_nan_is() -> None:
    """Issue 41: the job writes +/-inf as "Infinity"/"-Infinity" (not null any more); each is
    non-finite for the trigger, and a NaN (null) still is."""
    run_id = running_run(subscriber(webhook="https://hooks.example.com/x"))
    spool(run_id, line(1, '{"loss": "Infinity", "acc": 0.5}'))
    [row] = deliveries(run_id)
    assert row.payload["keys"] == ["loss"] and row.payload["step"] == 1
    spool(run_id, line(2, '{"acc": "-Infinity"}'), line(3, '{"grad_norm": null}'))
    by_detail = {d.detail: d.payload for d in deliveries(run_id)}
    assert sorted(by_detail) == ["acc", "loss"]
    assert by_detail["acc"]["keys"] == ["acc", "grad_norm"] and by_detail["acc"]["step"] == 2


def test_a_run_without_a_new_step_for_n_minutes_is_stalled_once() -> None:
    owner = subscriber(webhook="https://hooks.example.com/x", stalled_minutes=2)
    stalled = running_run(owner, started_ago=600)
    fresh = running_run(owner, started_ago=600)
    young = running_run(owner, started_ago=60)  # started a minute ago, no step yet
    now = utcnow().timestamp()
    with session_scope() as session:
        ingest_points(session, run_id=stalled, points=[("train/loss", 7, 0.5, now - 300)])
        # The worker's own system series go on while training hangs: not a step.
        ingest_points(session, run_id=stalled, points=[("sys/cpu_percent", 590, 99.0, now)])
        ingest_points(session, run_id=fresh, points=[("train/loss", 9, 0.5, now - 5)])
    for _ in range(2):
        with session_scope() as session:
            check_stalled(session, now=utcnow())
    [row] = deliveries(stalled)
    assert row.event.value == "stalled" and "no new step for 2 minutes" in row.payload["text"]
    assert deliveries(fresh) == [] and deliveries(young) == []


def test_a_leased_gpu_at_zero_utilisation_for_n_minutes_is_told_once() -> None:
    owner = subscriber(webhook="https://hooks.example.com/x", gpu_idle_minutes=10)
    run_id = running_run(owner)
    host = f"gpu-host-{secrets.token_hex(3)}"
    t0 = utcnow()

    def stats(util: float, at: datetime) -> None:
        """The host heartbeat's write, with GPU 0 at `util` and GPU 1 busy, read through the
        NVML edge's stand-in."""
        nvml = fake_nvml([], [4242])
        nvml.gpus[0]["util"] = util
        with session_scope() as session:
            touch_host(session, host=host, gpus=[0, 1], now=at, gpu_stats=read_gpu_stats(nvml))

    stats(0, t0)
    with session_scope() as session:
        session.add_all(GpuLease(host=host, gpu_index=i, run_id=run_id) for i in (0, 1))
    checks = PeriodicChecks()

    def check(minutes: float) -> int:
        with session_scope() as session:
            return checks.check_gpu_idle(session, now=t0 + timedelta(minutes=minutes))

    assert check(0) == 0
    stats(35, t0 + timedelta(minutes=5))  # busy for a moment: the idle stretch starts again
    assert check(5) == 0
    stats(0, t0 + timedelta(minutes=6))
    assert check(6) == 0
    stats(0, t0 + timedelta(minutes=15))
    assert check(15) == 0  # 9 minutes
    stats(0, t0 + timedelta(minutes=16))
    assert check(16) == 1
    stats(0, t0 + timedelta(minutes=30))
    assert check(30) == 0  # once per run
    [row] = deliveries(run_id)
    assert row.payload["gpus"] == [f"{host}:0"] and "idle for 10 minutes" in row.payload["text"]


def test_a_disabled_owner_or_no_settings_records_nothing() -> None:
    owner = subscriber(webhook="https://hooks.example.com/x")
    with session_scope() as session:
        from app.auth.models import User

        user = session.get(User, owner)
        assert user is not None
        user.is_active = False
    run_id = running_run(owner)
    with session_scope() as session:
        lifecycle.fail(session, run_id=run_id, attempt=1, reason="x")
        assert session.get(NotificationSettings, owner) is not None
    assert deliveries(run_id) == []


def test_the_spool_parser_says_whether_a_batch_has_a_non_finite_value_at_no_cost() -> None:
    from worker.spool_lines import parse_spool

    finite = (line(1, '{"a": 1.0}') + "\n").encode()
    assert parse_spool(finite).non_finite is False  # the forwarder skips the NaN check
    assert parse_spool(finite + (line(2, '{"a": null}') + "\n").encode()).non_finite is True
    assert parse_spool((line(3, '{"a": NaN}') + "\n").encode()).non_finite is True  # slow path
    # +/-inf as the job writes them (issue 41): as non-finite as NaN
    assert parse_spool(finite + (line(4, '{"a": "-Infinity"}') + "\n").encode()).non_finite
    assert parse_spool((line(5, '{"a": Infinity}') + "\n").encode()).non_finite is True


def test_a_worker_lost_guess_corrected_by_its_job_s_exit_sends_only_the_final_outcome(
    smtp, monkeypatch
) -> None:
    """Reaped "worker lost", then settled to how the job exited (issue 27): one message, the
    final outcome's; a guess never corrected is still sent once its hold is over."""
    with webhook_receiver() as hook:
        owner = subscriber(webhook=hook.url, events=["succeeded", "failed"])
        corrected, uncorrected = running_run(owner), running_run(owner)
        with session_scope() as session:
            for run_id in (corrected, uncorrected):
                reason = f"{WORKER_LOST}: no heartbeat for 60 s"
                assert lifecycle.fail(session, run_id=run_id, attempt=1, reason=reason)
        deliver_due()  # the guesses are held: nothing goes out yet
        assert hook.requests == []
        with session_scope() as session:
            assert lifecycle.settle(session, run_id=corrected, attempt=1, exit_code=0, error=None)
        wait_until(lambda: deliver_due() or hook.bodies, 30, "the final outcome sent")
        deliver_due()
        assert [(b["event"], b["run"]["id"]) for b in hook.bodies] == [("succeeded", corrected)]
        with session_scope() as session:  # the other guess's hold is over
            session.execute(
                update(Delivery)
                .where(Delivery.run_id == uncorrected)
                .values(next_attempt_at=utcnow())
            )
        deliver_all()
        assert [(b["event"], b["run"]["id"]) for b in hook.bodies[1:]] == [("failed", uncorrected)]
