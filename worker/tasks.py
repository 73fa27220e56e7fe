"""Celery tasks: thin, idempotent, take ids."""

from __future__ import annotations

from typing import Any

from celery.signals import worker_shutting_down

from worker.celery_app import RUN_TASK, celery_app
from worker.runner import SHUTTING_DOWN, execute_run


@worker_shutting_down.connect
def _stop_running_jobs(**_kwargs: Any) -> None:
    SHUTTING_DOWN.set()


@celery_app.task(name=RUN_TASK, acks_late=True)
def run_training(run_id: int) -> str | None:
    return execute_run(run_id)
