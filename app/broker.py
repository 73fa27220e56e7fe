"""The broker client: the one place that builds the Celery app, names the tasks and sends them.

The server enqueues (app.runs.state.lifecycle), answers readiness (app.ops.ready) and declares the
queue before `torchyard up` starts its children; the worker registers its task functions on
this same app (worker/tasks.py) and consumes. The app lives here, not in the worker, so that the
server never imports the host agent: a task is sent by name, and only the worker process loads
the functions behind the names.
"""

from __future__ import annotations

from celery import Celery

from app.settings import get_settings
from app.settings_pools import LOCAL_POOL

RUN_TASK = "torchyard.run"
SWEEP_ADVANCE_TASK = "sweeps.advance"
NODE_TASK = "torchyard.node"
POLLING_INTERVAL = 0.05
# Seconds a broker socket may stay silent before it counts as gone (issue 39).
BROKER_SOCKET_TIMEOUT = 5.0


def make_celery() -> Celery:
    settings = get_settings()
    broker = settings.resolved_broker_url
    # No `include`: the worker's entry point (worker/__main__.py) imports its task module
    # before Celery starts, so the task functions are registered by the process that runs them.
    app = Celery("torchyard", broker=broker)
    if broker.startswith("sqla+"):
        # The SQL broker's SQLite file lives in the data dir, made when the app first reads
        # its configuration (a send, a connection, the worker's start), never at import:
        # importing this module made ./torchyard-data wherever it ran, and a wheel built in
        # that clone carried it (issue 38).
        app.on_configure.connect(lambda **_: settings.make_data_dir(), weak=False)
        # The SQL transport polls, 1 s by default: most of a run's launch latency. Its channel
        # hands every transport option to create_engine, so polling_interval cannot go there.
        from kombu.transport import sqlalchemy as kombu_sqla

        kombu_sqla.Transport.polling_interval = POLLING_INTERVAL
        # ... and a poll of an unchanged SQLite file asks nothing of it (app/sql_broker.py).
        from app.sql_broker import gate_sqlite_polls

        gate_sqlite_polls()
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        # No remote control: torchyard never inspects or commands its workers, and with it on
        # any process that reaches the broker (a job, a user's script) could broadcast
        # cancel_consumer and silently stop every worker from taking runs (issue 27).
        worker_enable_remote_control=False,
    )
    if broker.startswith("redis"):
        app.conf.broker_transport_options = {
            # A run can train for days: redelivering its unacked task sooner would start it
            # twice (the run task re-checks the run's status, but the message would bounce).
            "visibility_timeout": 7 * 24 * 3600,
            # A Redis that went away without closing the socket (a failover, a killed host) is
            # noticed within seconds, not at the kernel's TCP timeout; and a publish from a
            # request never hangs on a broker that does not answer (issue 39).
            "socket_keepalive": True,
            "socket_timeout": BROKER_SOCKET_TIMEOUT,
            "socket_connect_timeout": BROKER_SOCKET_TIMEOUT,
            "health_check_interval": BROKER_SOCKET_TIMEOUT,
        }
    return app


celery_app = make_celery()


POOL_QUEUE_PREFIX = "torchyard.pool."


def pool_queue(pool: str) -> str:
    """The queue of a pool's runs, which only that pool's workers consume (issue 40). The
    `local` pool keeps Celery's default queue: the one every worker consumed before pools
    existed, so a deployment's waiting messages and its workers go on as they were."""
    if pool == LOCAL_POOL:
        return str(celery_app.conf.task_default_queue)
    return f"{POOL_QUEUE_PREFIX}{pool}"


def send_run(run_id: int, dispatch: int, pool: str = LOCAL_POOL) -> None:
    """Hand the run to its pool's queue; any worker of that pool, on any host, may take it.
    ``dispatch``: the run's current message number (app.runs.state.dispatch), so that an older
    message is dropped."""
    celery_app.send_task(RUN_TASK, args=[run_id, dispatch], queue=pool_queue(pool))


def host_queue(host: str) -> str:
    """The queue only `host`'s worker consumes (besides the shared one): a multi-node run's
    node k > 0 must run on the host the scheduler leased its GPUs on (worker/__main__.py)."""
    return f"torchyard.host.{host}"


def send_node(run_id: int, attempt: int, node: int, host: str) -> None:
    """Node `node` of a multi-node run's attempt, to its host's worker (app.runs.nodes)."""
    celery_app.send_task(NODE_TASK, args=[run_id, attempt, node], queue=host_queue(host))


def send_sweep_advance(sweep_id: int) -> None:
    """A trial ended: its sweep may launch the next one (app.sweeps.service.advance)."""
    celery_app.send_task(SWEEP_ADVANCE_TASK, args=[sweep_id])


def declare_default_queue() -> None:
    """Create the task queue once, before `torchyard up` starts the worker and the API: with
    the SQL broker each process inserts the queue's row on first use, and when both did at
    once the loser crashed the worker ('UNIQUE constraint failed: kombu_queue.name')."""
    from kombu.entity import Queue

    with celery_app.connection_for_write() as conn:
        # kombu's Queue has no type hints.
        queue = Queue(celery_app.conf.task_default_queue)  # type: ignore[no-untyped-call]
        queue(conn.default_channel).declare()  # type: ignore[no-untyped-call]
