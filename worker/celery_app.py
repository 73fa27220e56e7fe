"""The one place that builds the Celery app (server side enqueues, worker side consumes)."""

from __future__ import annotations

from celery import Celery

from app.settings import get_settings

RUN_TASK = "torchyard.run"


def make_celery() -> Celery:
    settings = get_settings()
    broker = settings.resolved_broker_url
    if broker.startswith("sqla+sqlite"):
        settings.resolved_data_dir.mkdir(parents=True, exist_ok=True)
    app = Celery("torchyard", broker=broker, include=["worker.tasks"])
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        # The SQL transport polls; its 1 s default is most of a run's launch latency.
        broker_transport_options={"polling_interval": 0.1, "visibility_timeout": 7 * 24 * 3600},
    )
    if broker.startswith("redis"):
        app.conf.broker_transport_options = {
            "visibility_timeout": 7 * 24 * 3600,
            "polling_interval": 0.1,
        }
    return app


celery_app = make_celery()
