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
from functools import lru_cache
from pathlib import Path

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError, OperationalError

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
from app.settings import get_settings
from app.timeutil import utcnow
from worker.forwarder import forward
from worker.gpus import Inventory, detect, gpu_stats
from worker.launcher import LaunchSpec, build_launch
from worker.process import JobProcess

log = logging.getLogger(__name__)

ERROR_TAIL_LINES = 30
# Set when the worker begins a shutdown: running jobs are stopped and their runs failed with
# the reason, never left "running" (requeue with resume comes with the reliability work).
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
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(claimed.config, indent=2))
    resume = claimed.resume_from
    token = secrets.token_hex(16)
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
        )
    )
    log_path = run_dir / "output.log"
    try:
        job = JobProcess(launch, log_path=log_path, cwd=run_dir, token=token)
    except OSError as exc:
        return _finish(run_id, RunStatus.failed, None, f"could not start the job: {exc}")
    with session_scope() as session:
        session.execute(update(Run).where(Run.id == run_id).values(pid=job.pid))
    log.info("run %s started: pid %s, %s", run_id, job.pid, " ".join(launch.argv))
    stopped_by = _watch(
        run_id,
        job,
        run_dir / "metrics.jsonl",
        settings.forwarder_interval_seconds,
        settings.cancel_grace_seconds,
        has_leases=bool(claimed.gpu_indices),
    )
    code = job.wait()
    _drain(run_id, run_dir / "metrics.jsonl", has_leases=bool(claimed.gpu_indices))
    if stopped_by == "cancel":
        return _finish(run_id, RunStatus.cancelled, code, None)
    if stopped_by == "shutdown":
        return _finish(run_id, RunStatus.failed, code, WORKER_SHUTDOWN_REASON)
    if code == 0:
        return _finish(run_id, RunStatus.succeeded, code, None)
    tail = error_tail(log_path) or f"the job exited with code {code}"
    return _finish(run_id, RunStatus.failed, code, tail)


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
    heartbeat_every = get_settings().lease_ttl_seconds / 5
    last_heartbeat = time.monotonic()
    while job.poll() is None:
        time.sleep(interval)
        try:
            with session_scope() as session:
                forward(session, run_id=run_id, metrics_path=metrics_path)
                if has_leases and time.monotonic() - last_heartbeat >= heartbeat_every:
                    heartbeat_leases(session, run_id=run_id)
                    last_heartbeat = time.monotonic()
                run = session.get(Run, run_id)
                cancel = run is None or run.cancel_requested
        except Exception:  # the database may be briefly away; the spool keeps everything
            log.exception("run %s: forwarding failed; will retry", run_id)
            continue
        if cancel:
            log.info("run %s: cancel requested, stopping its processes", run_id)
            job.stop(grace)
            return "cancel"
        if SHUTTING_DOWN.is_set():
            log.warning("run %s: worker shutting down, stopping its processes", run_id)
            job.stop(grace)
            return "shutdown"
    return None


def _drain(run_id: int, metrics_path: Path, *, has_leases: bool = False) -> None:
    """Move what is left of the spool. The run keeps its GPUs until _finish releases them, so
    its leases are heartbeated here too: a long drain must not let them expire and hand the
    GPUs to the next run while this one is not finished yet."""
    for _ in range(10_000):
        with session_scope() as session:
            if has_leases:
                heartbeat_leases(session, run_id=run_id)
            if not forward(session, run_id=run_id, metrics_path=metrics_path):
                return


def _finish(run_id: int, status: RunStatus, code: int | None, error: str | None) -> str:
    with session_scope() as session:
        session.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(status=status, finished_at=utcnow(), exit_code=code, error=error)
        )
        release_leases(session, run_id=run_id)
    log.info("run %s %s (exit code %s)", run_id, status.value, code)
    return status.value
