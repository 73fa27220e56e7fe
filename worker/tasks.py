"""Celery tasks: thin, idempotent, take ids; registered on the broker client's app
(app.broker), by name, in the worker process only."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from celery import Task
from celery.signals import worker_ready, worker_shutting_down

from app.broker import NODE_TASK, RUN_TASK, SWEEP_ADVANCE_TASK, celery_app, pool_queue
from app.broker_queue import BrokerUnreachable, forget_taken
from app.periodic import Process, Runner, for_process
from app.runs.state.dispatch import current_message
from app.runs.state.reaper import use_local_jobs
from app.scheduled import JOBS
from app.settings import get_settings
from app.sweeps.driver import advance_sweep
from worker.broker_link import ConsumingAgain
from worker.executor import NotRun
from worker.executors import current as current_executor
from worker.liveness import HostJobs
from worker.runner import execute_node
from worker.scheduled import HOST_HEARTBEAT
from worker.supervision import SHUTTING_DOWN

_PERIODIC: list[Runner] = []

celery_app.steps["consumer"].add(ConsumingAgain)


@worker_ready.connect  # type: ignore[untyped-decorator]  # Celery has no type hints
def _start_periodic_work(**_kwargs: Any) -> None:
    # First of all: the jobs the previous worker on this host left training (their runs
    # heartbeat again before a reaper could count them lost).
    current_executor().adopt()
    # The reaper here knows this host's jobs (worker.liveness); then every periodic job of a
    # worker: the host heartbeat, the reaper, the notifications, the sweeps' safety net.
    use_local_jobs(HostJobs())
    _PERIODIC.append(Runner(for_process(Process.WORKER, (HOST_HEARTBEAT, *JOBS))).start())


@worker_shutting_down.connect  # type: ignore[untyped-decorator]  # Celery has no type hints
def _stop_running_jobs(**_kwargs: Any) -> None:
    SHUTTING_DOWN.set()
    for runner in _PERIODIC:
        runner.stop()


def _own_queue() -> str:
    """Where a run task this worker hands back goes: its pool's queue, the one it came from
    (a worker takes run tasks from no other), never Celery's default for every pool."""
    return pool_queue(get_settings().worker_pool)


@celery_app.task(name=RUN_TASK, acks_late=True, bind=True, max_retries=None)  # type: ignore[untyped-decorator]  # Celery has no type hints
def run_training(self: Task, run_id: int, dispatch: int = 0) -> str | None:
    """``dispatch``: the message's number (app.runs.state.dispatch); a message sent before its run
    was re-sent is dropped here, so a lost-and-found duplicate never runs anything."""
    if SHUTTING_DOWN.is_set():
        # A worker on its way out starts nothing (not even a run it just requeued itself):
        # the task goes back to the broker for the next worker (of this pool: its queue).
        raise self.retry(countdown=0, max_retries=None, queue=_own_queue())
    if not current_message(run_id, dispatch):
        return None
    outcome = current_executor().execute(run_id)
    if outcome is not NotRun.WAITING:
        return None if outcome is NotRun.GONE else outcome.value
    # Not yet (GPUs busy, or runs ahead of it): give the thread back and put the task back on
    # the broker, where any worker of any host may ask again. countdown=0 sends no ETA, so no
    # worker holds it unacked in memory (Redis would redeliver such a message only after its
    # visibility timeout).
    if not SHUTTING_DOWN.is_set():
        time.sleep(get_settings().schedule_retry_seconds)
    tag = (self.request.delivery_info or {}).get("delivery_tag")
    try:
        raise self.retry(countdown=0, max_retries=None, queue=_own_queue())
    finally:  # the retry is in the broker now: this copy goes even if its channel is gone
        if tag:
            with contextlib.suppress(BrokerUnreachable):
                forget_taken(str(tag))


@celery_app.task(name=NODE_TASK, acks_late=True)  # type: ignore[untyped-decorator]  # Celery has no type hints
def run_node(run_id: int, attempt: int, node: int) -> None:
    """Node `node` (> 0) of a multi-node run's attempt, sent to this host's own queue by the
    transaction that started the run (app.runs.nodes). Idempotent: a run that no longer runs
    as `attempt` is left alone."""
    execute_node(run_id, attempt, node)


@celery_app.task(name=SWEEP_ADVANCE_TASK, acks_late=True)  # type: ignore[untyped-decorator]  # Celery has no type hints
def advance(sweep_id: int) -> list[int]:
    """A trial of the sweep ended: launch the next ones, or end the sweep (idempotent)."""
    return advance_sweep(sweep_id)
