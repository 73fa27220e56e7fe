"""Celery tasks: thin, idempotent, take ids."""

from __future__ import annotations

import threading
import time
from typing import Any

from celery import Task
from celery.signals import worker_ready, worker_shutting_down

from app.notifications.delivery import notify_forever
from app.settings import get_settings
from app.sweeps.driver import advance_forever, advance_sweep
from worker.adoption import adopt_jobs
from worker.celery_app import RUN_TASK, SWEEP_ADVANCE_TASK, celery_app
from worker.liveness import reap_forever
from worker.runner import NotRun, execute_run, heartbeat_host, inventory
from worker.watch import SHUTTING_DOWN

_HOST_HEARTBEAT_STOP = threading.Event()


@worker_ready.connect  # type: ignore[untyped-decorator]  # Celery has no type hints
def _start_host_heartbeat(**_kwargs: Any) -> None:
    # First of all: the jobs the previous worker on this host left training (their runs
    # heartbeat again before a reaper could count them lost).
    adopt_jobs(inventory().host)
    threading.Thread(
        target=heartbeat_host, args=(_HOST_HEARTBEAT_STOP,), name="host-heartbeat", daemon=True
    ).start()
    threading.Thread(
        target=reap_forever, args=(_HOST_HEARTBEAT_STOP,), name="reaper", daemon=True
    ).start()
    # The outbox: notifications recorded by this worker's runs (and anyone's) go out.
    threading.Thread(
        target=notify_forever, args=(_HOST_HEARTBEAT_STOP,), name="notify", daemon=True
    ).start()
    # Sweeps whose trials ended while no worker was up (or whose advance was lost) go on.
    threading.Thread(
        target=advance_forever, args=(_HOST_HEARTBEAT_STOP,), name="sweeps", daemon=True
    ).start()


@worker_shutting_down.connect  # type: ignore[untyped-decorator]  # Celery has no type hints
def _stop_running_jobs(**_kwargs: Any) -> None:
    SHUTTING_DOWN.set()
    _HOST_HEARTBEAT_STOP.set()


@celery_app.task(name=RUN_TASK, acks_late=True, bind=True, max_retries=None)  # type: ignore[untyped-decorator]  # Celery has no type hints
def run_training(self: Task, run_id: int) -> str | None:
    if SHUTTING_DOWN.is_set():
        # A worker on its way out starts nothing (not even a run it just requeued itself):
        # the task goes back to the broker for the next worker.
        raise self.retry(countdown=0, max_retries=None)
    outcome = execute_run(run_id)
    if outcome is not NotRun.WAITING:
        return None if outcome is NotRun.GONE else outcome.value
    # Not yet (GPUs busy, or runs ahead of it): give the thread back and put the task back on
    # the broker, where any worker of any host may ask again. countdown=0 sends no ETA, so no
    # worker holds it unacked in memory (Redis would redeliver such a message only after its
    # visibility timeout).
    if not SHUTTING_DOWN.is_set():
        time.sleep(get_settings().schedule_retry_seconds)
    raise self.retry(countdown=0, max_retries=None)


@celery_app.task(name=SWEEP_ADVANCE_TASK, acks_late=True)  # type: ignore[untyped-decorator]  # Celery has no type hints
def advance(sweep_id: int) -> list[int]:
    """A trial of the sweep ended: launch the next ones, or end the sweep (idempotent)."""
    return advance_sweep(sweep_id)
