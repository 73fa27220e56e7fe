"""A session's end conditions besides its owner's stop, checked by the API's periodic round
(app/scheduled.py): its time limit (a warning on its page ``session_warning_minutes`` before,
then it is stopped), and idleness: no activity in its JupyterLab (its ``/api/status``
``last_activity``: kernels busy, the page's requests) for ``session_idle_minutes`` while its
leased GPUs are idle (at most ``session_idle_gpu_percent`` at the host's last heartbeat, or no
reading: the fake inventory). Either way it is stopped like a cancel (every process of it, its
leases released), so its files stay in its run folder, and the reason is said on its page."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import session_scope
from app.gpus.models import GpuLease, WorkerHost
from app.periodic import Process, declare
from app.runs.files.job_files import job_socket
from app.runs.models import Run, RunStatus
from app.runs.state import lifecycle, notices
from app.sessions.access import lab_secret
from app.sessions.service import ends_at, is_session
from app.settings import Settings, get_settings
from app.timeutil import as_utc, utcnow
from torchyard.contract import RunPaths

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    """What the round does to one session: warn, end (and why), or nothing."""

    warn: str | None = None
    end: str | None = None


def lab_last_activity(run_id: int, settings: Settings) -> datetime | None:
    """Its JupyterLab's last activity, asked over its socket with its secret; None when it
    does not answer (starting, or gone)."""
    # httpx here, not at the module's top: it imports its command line (click, rich, pygments:
    # ~16 MiB of PSS) into every process that imports this module, the worker and both API
    # processes among them, for a call made only while a session runs (bench/idle_memory.py).
    import httpx

    paths = RunPaths(settings.run_dir(run_id))
    token = lab_secret(paths)
    if token is None:
        return None
    try:
        with (
            job_socket(paths.session_socket) as address,
            httpx.Client(
                transport=httpx.HTTPTransport(uds=address), base_url="http://session", timeout=5
            ) as client,
        ):
            answer = client.get(
                f"/sessions/{run_id}/lab/api/status",
                headers={"Authorization": f"token {token}"},
            )
        answer.raise_for_status()
        return as_utc(datetime.fromisoformat(answer.json()["last_activity"]))
    except (OSError, httpx.HTTPError, KeyError, ValueError):
        return None


def gpus_idle(session: Session, run_id: int, threshold: float) -> bool:
    """Every GPU the run holds is at or below `threshold` percent (unknown counts as idle)."""
    leases = session.execute(
        select(GpuLease.host, GpuLease.gpu_index).where(GpuLease.run_id == run_id)
    ).all()
    for host, index in leases:
        worker = session.get(WorkerHost, host)
        held = (worker.gpu_stats if worker is not None else None) or ()
        stats = {int(g["index"]): g for g in held}
        used = stats.get(index, {}).get("utilization")
        if used is not None and float(used) > threshold:
            return False
    return True


def verdict(run: Run, *, now: datetime, last_activity: datetime | None, idle_gpus: bool) -> Verdict:
    """The rules, apart from where their inputs come from."""
    settings = get_settings()
    ends = ends_at(run)
    if ends is None:
        return Verdict()
    if now >= ends:
        return Verdict(end=f"session ended: its time limit ({ends:%Y-%m-%d %H:%M} UTC) was reached")
    idle_limit = settings.session_idle_minutes
    # A JupyterLab that does not answer (still starting) is not called idle: its time limit
    # still ends it.
    if idle_limit > 0 and idle_gpus and last_activity is not None and run.started_at:
        since = max(as_utc(run.started_at), last_activity)
        if now - since >= timedelta(minutes=idle_limit):
            return Verdict(
                end=f"session ended: idle for {idle_limit:g} minutes (no activity in its "
                "JupyterLab and its GPUs idle); its files are kept"
            )
    warn_at = ends - timedelta(minutes=settings.session_warning_minutes)
    held = notices.session_part(run.notices)
    if now >= warn_at and not held.get("warning"):
        return Verdict(
            warn=f"this session ends at {ends:%H:%M} UTC (its time limit): save your work, or "
            "extend it while no run waits for GPUs"
        )
    return Verdict()


def check_sessions() -> None:
    """One round over the running sessions."""
    settings = get_settings()
    with session_scope() as session:
        running = [
            r
            for r in session.scalars(select(Run).where(Run.status == RunStatus.running))
            if is_session(r)
        ]
        ids = [r.id for r in running]
    for run_id in ids:
        activity = lab_last_activity(run_id, settings)
        with session_scope() as session:
            run = session.get(Run, run_id)
            if run is None or run.status is not RunStatus.running:
                continue
            idle = gpus_idle(session, run_id, settings.session_idle_gpu_percent)
            found = verdict(run, now=utcnow(), last_activity=activity, idle_gpus=idle)
            if found.warn:
                notices.session_note(run, warning=found.warn)
            if found.end:
                notices.session_note(run, ended=found.end, warning=None)
                lifecycle.cancel(session, run_id=run_id)
                log.info("session %s: %s", run_id, found.end)


CHECK = declare(
    "sessions.limits", check_sessions, every="session_check_seconds", runs_in={Process.API}
)
