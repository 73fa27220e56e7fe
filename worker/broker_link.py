"""Says when the worker consumes again after losing its broker (issue 39: after a Redis restart
the workers of a soak took nothing for minutes, and no line said whether or when they came
back). A consumer bootstep: Celery stops every consumer step when the connection is lost and
starts them again once it is re-established, with the task consumer already reading the queues,
so a start after the first is the moment the worker takes work again."""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import bootsteps

log = logging.getLogger(__name__)


class ConsumingAgain(bootsteps.StartStopStep):  # type: ignore[misc]  # Celery has no type hints
    """Logs each return to consuming after a connection loss, with how long it took."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.starts = 0
        self.stopped_at: float | None = None

    def start(self, parent: Any) -> None:
        self.starts += 1
        if self.starts > 1:
            away = time.monotonic() - self.stopped_at if self.stopped_at is not None else 0.0
            log.warning(
                "broker connection back: consuming from %s again, %.1f s after it was lost",
                parent.connection.as_uri() if parent.connection is not None else "the broker",
                away,
            )

    def stop(self, parent: Any) -> None:
        self.stopped_at = time.monotonic()
