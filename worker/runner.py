"""Runs one training run from start to end inside a worker: claim, launch, watch, finish.

Takes a run id, not an ORM object, and opens short units of work of its own, so the database
is never held while the job trains.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import CursorResult, update

from app.db import session_scope
from app.runs.models import Run, RunStatus
from app.settings import get_settings
from app.timeutil import utcnow
from worker.forwarder import forward
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


def error_tail(log_path: Path) -> str:
    """The last lines of the job's output, from its last traceback when there is one."""
    try:
        text = log_path.read_bytes()[-64_000:].decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    start = text.rfind("Traceback (most recent call last)")
    lines = (text[start:] if start >= 0 else text).rstrip().splitlines()
    return "\n".join(lines[-ERROR_TAIL_LINES:])


def claim(run_id: int, host: str) -> dict[str, Any] | None:
    """queued -> running, atomically: a redelivered task finds the run taken and does nothing."""
    with session_scope() as session:
        result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
            update(Run)
            .where(Run.id == run_id, Run.status == RunStatus.queued, ~Run.cancel_requested)
            .values(status=RunStatus.running, started_at=utcnow(), worker_host=host)
        )
        if not result.rowcount:
            return None
        run = session.get(Run, run_id)
        assert run is not None
        return {"config": run.config, "resume_from": run.resume_from}


def execute_run(run_id: int) -> str | None:
    """Returns the final status, or None when the run was not this worker's to run."""
    settings = get_settings()
    host = settings.worker_host or socket.gethostname()
    claimed = claim(run_id, host)
    if claimed is None:
        log.info("run %s is not queued any more; nothing to do", run_id)
        return None
    try:
        return _execute_claimed(run_id, claimed)
    except Exception as exc:
        # A claimed run must never stay "running" because the worker itself failed.
        log.exception("run %s: the worker failed while running it", run_id)
        return _finish(run_id, RunStatus.failed, None, f"worker error: {exc!r}")


def _execute_claimed(run_id: int, claimed: dict[str, Any]) -> str:
    settings = get_settings()
    run_dir = settings.run_dir(run_id)
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(claimed["config"], indent=2))
    resume = claimed["resume_from"]
    token = secrets.token_hex(16)
    launch = build_launch(
        LaunchSpec(
            run_id=run_id,
            run_dir=run_dir,
            config=claimed["config"],
            python=sys.executable,
            job_token=token,
            master_port=free_port(),
            single_process=settings.single_process_launch,
            resume_from=settings.runs_dir / resume if resume else None,
            base_env=_job_base_env(),
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
    )
    code = job.wait()
    _drain(run_id, run_dir / "metrics.jsonl")
    if stopped_by == "cancel":
        return _finish(run_id, RunStatus.cancelled, code, None)
    if stopped_by == "shutdown":
        return _finish(run_id, RunStatus.failed, code, WORKER_SHUTDOWN_REASON)
    if code == 0:
        return _finish(run_id, RunStatus.succeeded, code, None)
    tail = error_tail(log_path) or f"the job exited with code {code}"
    return _finish(run_id, RunStatus.failed, code, tail)


def _job_base_env() -> dict[str, str]:
    # The job must not inherit the worker's settings (database URLs, secrets).
    return {k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")}


def _watch(
    run_id: int, job: JobProcess, metrics_path: Path, interval: float, grace: float
) -> str | None:
    """Forward metrics while the job runs; stop it on a cancel request or a worker shutdown.

    Returns what stopped it ("cancel", "shutdown") or None when the job ended by itself.
    """
    while job.poll() is None:
        time.sleep(interval)
        try:
            with session_scope() as session:
                forward(session, run_id=run_id, metrics_path=metrics_path)
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


def _drain(run_id: int, metrics_path: Path) -> None:
    for _ in range(10_000):
        with session_scope() as session:
            if not forward(session, run_id=run_id, metrics_path=metrics_path):
                return


def _finish(run_id: int, status: RunStatus, code: int | None, error: str | None) -> str:
    with session_scope() as session:
        session.execute(
            update(Run)
            .where(Run.id == run_id)
            .values(status=status, finished_at=utcnow(), exit_code=code, error=error)
        )
    log.info("run %s %s (exit code %s)", run_id, status.value, code)
    return status.value
