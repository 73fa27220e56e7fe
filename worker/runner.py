"""Runs one training run from start to end inside a worker: start (scheduler + GPU leases),
launch, watch (metrics, lease heartbeats, cancel), finish (status, leases released).

Takes a run id, not an ORM object, and opens short units of work of its own, so the database
is never held while the job trains.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

from sqlalchemy import update
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError
from sqlalchemy.orm import Session

from app.db import session_scope
from app.gpus.service import (
    StartResult,
    format_indices,
    heartbeat_leases,
    release_leases,
    touch_host,
    try_start,
)
from app.runs.models import Run, RunStatus
from app.runs.recovery import hand_over
from app.settings import get_settings
from app.timeutil import utcnow
from torchyard.contract import CHECKPOINTS_DIR, CONFIG_FILE, LOG_FILE, METRICS_FILE
from worker import artifacts, provenance, spool
from worker.forwarder import forward
from worker.gpus import Inventory, detect, gpu_stats
from worker.launcher import LaunchSpec, build_launch
from worker.process import JobProcess
from worker.workspace import ScriptPathError, resolve_script

log = logging.getLogger(__name__)

ERROR_TAIL_LINES = 30
# Set when the worker begins a warm shutdown: running jobs get shutdown_grace_seconds to end,
# then are stopped, and their runs requeued (max_restarts) or failed with the reason.
SHUTTING_DOWN = threading.Event()
WORKER_SHUTDOWN_REASON = "the worker shut down while the run was training"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_RANK_TRACEBACK = re.compile(r"^(\[rank\d+\]: )Traceback \(most recent call last\)", re.M)


def error_tail(log_path: Path) -> str:
    """The last lines of the job's output, from its last traceback when there is one.

    Under torchrun the last traceback is torchrun's own summary ("ChildFailedError"); the
    cause is the last traceback of a rank, so that rank's lines are what the user needs.
    """
    try:
        text = log_path.read_bytes()[-64_000:].decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    ranked = list(_RANK_TRACEBACK.finditer(text))
    if ranked:
        prefix = ranked[-1].group(1)
        rank_lines = text[ranked[-1].start() :].splitlines()
        lines = [line for line in rank_lines if line.startswith(prefix)]
    else:
        start = text.rfind("Traceback (most recent call last)")
        lines = (text[start:] if start >= 0 else text).rstrip().splitlines()
    return "\n".join(lines[-ERROR_TAIL_LINES:])


# execute_run's answer when the scheduler says "not yet": the task asks again shortly.
WAITING = "waiting"


@lru_cache
def inventory() -> Inventory:
    found = detect(get_settings())
    log.info("GPU inventory of %s: %s (%s)", found.host, list(found.gpus) or "none", found.source)
    return found


def start(run_id: int) -> StartResult:
    """Ask the scheduler, in one serialized transaction, whether this host starts the run now;
    if so its leases are taken and it is running when this returns."""
    settings = get_settings()
    inv = inventory()
    stats = gpu_stats(inv)  # read before the transaction: NVML is not quick enough to hold a lock
    try:
        with session_scope() as session:
            return try_start(
                session,
                run_id=run_id,
                host=inv.host,
                inventory=list(inv.gpus),
                lease_ttl_seconds=settings.lease_ttl_seconds,
                starvation_seconds=settings.starvation_seconds,
                gpu_stats=stats,
            )
    except IntegrityError:  # a GPU leased twice: the database refused, so nothing was taken
        log.warning("run %s: lease conflict; will ask again", run_id)
        return StartResult("wait", reason="lease conflict")
    except OperationalError:  # the database is briefly away: the run stays queued
        log.exception("run %s: could not ask the scheduler; will ask again", run_id)
        return StartResult("wait", reason="database unavailable")


def heartbeat_host(stop: threading.Event) -> None:
    """Keep this host in the scheduler's view of live hosts while the worker is idle."""
    settings = get_settings()
    inv = inventory()
    while not stop.wait(max(0.5, settings.lease_ttl_seconds / 3)):
        try:
            with session_scope() as session:
                touch_host(
                    session,
                    host=inv.host,
                    gpus=list(inv.gpus),
                    now=utcnow(),
                    gpu_stats=gpu_stats(inv),
                )
        except Exception:
            log.exception("host heartbeat failed; will retry")


def execute_run(run_id: int) -> str | None:
    """Returns the final status, WAITING when the run may not start yet, or None when the run
    was not this worker's to run (no longer queued)."""
    started = start(run_id)
    if started.outcome == "gone":
        log.info("run %s is not queued any more; nothing to do", run_id)
        return None
    if started.outcome == "wait":
        log.debug("run %s waits: %s", run_id, started.reason)
        return WAITING
    try:
        return _execute_claimed(run_id, started)
    except Exception as exc:
        # A claimed run must never stay "running" because the worker itself failed.
        log.exception("run %s: the worker failed while running it", run_id)
        return _finish(run_id, RunStatus.failed, None, f"worker error: {exc!r}")


def _execute_claimed(run_id: int, claimed: StartResult) -> str:
    settings = get_settings()
    assert claimed.config is not None
    run_dir = settings.run_dir(run_id)
    (run_dir / CHECKPOINTS_DIR).mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG_FILE).write_text(json.dumps(claimed.config, indent=2))
    if claimed.attempt > 1:
        with_db(run_id, "start a new attempt", lambda s: spool.start_attempt(s, run_id, run_dir))
    resume = claimed.resume_from
    script: Path | None = None
    if claimed.config.get("script"):
        try:
            script = resolve_script(settings.workspace_dir, str(claimed.config["script"]))
        except ScriptPathError as exc:
            return _finish(run_id, RunStatus.failed, None, f"cannot run the script: {exc}")
    with session_scope() as session:
        record = provenance.worker_record(
            worker_host=inventory().host,
            gpu_indices=claimed.gpu_indices,
            script=script,
        )
        provenance.store(session, run_id=run_id, record=record)
    token = secrets.token_hex(16)
    artifacts.ensure_local(settings.runs_dir, resume)  # a checkpoint another host wrote
    launch = build_launch(
        LaunchSpec(
            run_id=run_id,
            run_dir=run_dir,
            config=claimed.config,
            python=sys.executable,
            job_token=token,
            master_port=free_port(),
            single_process=settings.single_process_launch,
            resume_from=settings.runs_dir / resume if resume else None,
            base_env=_job_base_env(claimed.gpu_indices),
            script=script,
            workspace=settings.workspace_dir.expanduser().resolve() if script else None,
        )
    )
    log_path = run_dir / LOG_FILE
    try:
        job = JobProcess(
            launch, log_path=log_path, cwd=run_dir, token=token, nice=settings.job_nice
        )
    except OSError as exc:
        return _finish(run_id, RunStatus.failed, None, f"could not start the job: {exc}")
    with session_scope() as session:
        session.execute(update(Run).where(Run.id == run_id).values(pid=job.pid))
    log.info("run %s started: pid %s, %s", run_id, job.pid, " ".join(launch.argv))
    stopped_by = _watch(
        run_id,
        job,
        run_dir / METRICS_FILE,
        settings.forwarder_interval_seconds,
        settings.cancel_grace_seconds,
        has_leases=bool(claimed.gpu_indices),
    )
    code = job.wait()
    _drain(run_id, run_dir / METRICS_FILE, has_leases=bool(claimed.gpu_indices))
    attempt = claimed.attempt
    if stopped_by == "cancel":
        return _finish(run_id, RunStatus.cancelled, code, None, attempt=attempt)
    if stopped_by == "shutdown":
        return _hand_over(run_id, attempt=attempt, reason=WORKER_SHUTDOWN_REASON)
    if code == 0:
        return _finish(run_id, RunStatus.succeeded, code, None, attempt=attempt)
    tail = error_tail(log_path) or f"the job exited with code {code}"
    return _finish(run_id, RunStatus.failed, code, tail, attempt=attempt)


def _job_base_env(gpu_indices: tuple[int, ...]) -> dict[str, str]:
    # The job must not inherit the worker's settings (database URLs, secrets).
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")}
    # Exactly the leased GPUs; none at all ("") for a run without GPUs.
    env["CUDA_VISIBLE_DEVICES"] = format_indices(gpu_indices)
    return env


def _watch(
    run_id: int,
    job: JobProcess,
    metrics_path: Path,
    interval: float,
    grace: float,
    *,
    has_leases: bool = False,
) -> str | None:
    """Forward metrics while the job runs; stop it on a cancel request or a worker shutdown.

    Returns what stopped it ("cancel", "shutdown") or None when the job ended by itself.
    """
    # Often enough that a lease never nears its expiry, rarely enough to spare SQLite's lock.
    settings = get_settings()
    # Often enough that a lease never nears its expiry, rarely enough to spare SQLite's lock.
    heartbeat_every = min(settings.lease_ttl_seconds / 5, settings.run_heartbeat_seconds)
    last_heartbeat = time.monotonic()
    recorded = False
    shutdown_deadline: float | None = None
    backoff = Backoff(interval)
    while job.poll() is None:
        time.sleep(backoff.delay)
        try:
            with session_scope() as session:
                if not recorded:
                    recorded = provenance.merge_job_record(
                        session, run_id=run_id, run_dir=metrics_path.parent
                    )
                forward(session, run_id=run_id, metrics_path=metrics_path)
                if time.monotonic() - last_heartbeat >= heartbeat_every:
                    _heartbeat(session, run_id=run_id, has_leases=has_leases)
                    last_heartbeat = time.monotonic()
                run = session.get(Run, run_id)
                cancel = run is None or run.cancel_requested
        except Exception as exc:  # the database may be briefly away; the spool keeps everything
            backoff.failed()
            log.warning(
                "run %s: forwarding failed (%s); retry in %.1f s", run_id, exc, backoff.delay
            )
            continue
        backoff.succeeded()
        if cancel:
            log.info("run %s: cancel requested, stopping its processes", run_id)
            job.stop(grace)
            return "cancel"
        if SHUTTING_DOWN.is_set():
            if shutdown_deadline is None:
                shutdown_deadline = time.monotonic() + settings.shutdown_grace_seconds
                log.warning(
                    "run %s: worker shutting down; the job has %.0f s to finish",
                    run_id,
                    settings.shutdown_grace_seconds,
                )
            elif time.monotonic() >= shutdown_deadline:
                log.warning("run %s: shutdown grace over, stopping its processes", run_id)
                job.stop(grace)
                return "shutdown"
    return None


class Backoff:
    """The forwarding loop's pace: the normal interval, doubling (to 5 s) while the database
    is away, back to normal after the first success."""

    MAX_DELAY = 5.0

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.delay = interval

    def failed(self) -> None:
        self.delay = min(self.MAX_DELAY, max(self.delay * 2, 0.2))

    def succeeded(self) -> None:
        self.delay = self.interval


def _heartbeat(session: Session, *, run_id: int, has_leases: bool) -> None:
    session.execute(
        update(Run)
        .where(Run.id == run_id, Run.status == RunStatus.running)
        .values(heartbeat_at=utcnow())
    )
    if has_leases:
        heartbeat_leases(session, run_id=run_id)


# How long the final drain waits for a checkpoint upload before it heartbeats again.
UPLOAD_WAIT_SECONDS = 0.25


def _drain(run_id: int, metrics_path: Path, *, has_leases: bool = False) -> None:
    """Move what is left of the spool. The run keeps its GPUs until _finish releases them, so
    its leases (and the run's own heartbeat) are kept fresh here too: a long drain must not
    let them expire and hand the GPUs to the next run while this one is not finished yet.
    A database that is away for a while (a PostgreSQL restart) is waited for with backoff."""
    with_db(
        run_id,
        "record the environment",
        lambda s: provenance.merge_job_record(s, run_id=run_id, run_dir=metrics_path.parent),
    )

    def one_batch(session: Session) -> int:
        _heartbeat(session, run_id=run_id, has_leases=has_leases)
        return forward(session, run_id=run_id, metrics_path=metrics_path, final=True)

    for _ in range(10_000):
        if artifacts.uploading(run_id):
            # A moment for an upload between batches, so the drain does not spin; outside
            # any transaction, so no lock (on SQLite the one write lock) is held meanwhile.
            artifacts.wait_for_uploads(run_id, timeout=UPLOAD_WAIT_SECONDS)
        if not with_db(run_id, "drain", one_batch):
            return


DB_RETRY_SECONDS = 300.0
T = TypeVar("T")


def with_db(run_id: int, what: str, work: Callable[[Session], T]) -> T:
    """One unit of work, tried again with backoff while the database is unreachable (up to
    DB_RETRY_SECONDS): a finished job's last points and status must not be lost to a database
    restart. ``work`` must be safe to repeat (forward() and the status updates are)."""
    backoff = Backoff(0.2)
    deadline = time.monotonic() + DB_RETRY_SECONDS
    while True:
        try:
            with session_scope() as session:
                return work(session)
        except DBAPIError as exc:
            if time.monotonic() > deadline:
                raise
            backoff.failed()
            log.warning("run %s: %s failed (%s); retry in %.1f s", run_id, what, exc, backoff.delay)
            time.sleep(backoff.delay)


def _finish(
    run_id: int, status: RunStatus, code: int | None, error: str | None, *, attempt: int = 0
) -> str:
    """The final status, written only while the run is still this worker's (running, same
    attempt): a run the reaper already handed over (failed "worker lost", or requeued after a
    long database outage) is not overwritten."""

    def write(session: Session) -> None:
        query = update(Run).where(Run.id == run_id, Run.status == RunStatus.running)
        if attempt:
            query = query.where(Run.attempt == attempt)
        done = session.execute(
            query.values(status=status, finished_at=utcnow(), exit_code=code, error=error)
        ).rowcount  # type: ignore[attr-defined]
        if done:
            release_leases(session, run_id=run_id)
        else:
            log.warning("run %s: no longer this worker's; its status stays as it is", run_id)

    with_db(run_id, "finish", write)
    log.info("run %s %s (exit code %s)", run_id, status.value, code)
    return status.value


def _hand_over(run_id: int, *, attempt: int, reason: str) -> str:
    """A run stopped by a worker shutdown: requeued (max_restarts) or failed with the reason."""

    def hand(session: Session) -> str:
        run = session.get(Run, run_id, populate_existing=True)
        if run is None or run.status != RunStatus.running or run.attempt != attempt:
            return "gone"
        return hand_over(session, run=run, reason=reason)

    outcome = with_db(run_id, "hand over", hand)
    log.info("run %s: %s (%s)", run_id, outcome, reason)
    return RunStatus.queued.value if outcome == "requeued" else RunStatus.failed.value
