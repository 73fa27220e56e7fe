"""`python -P -m worker ARGS`: Celery's command line on torchyard's app (`torchyard up` and
`torchyard worker` start the worker this way: the CLI and the composition root, torchyard.compose,
start it as a process, never import it).

Not `python -m celery -A app.broker`: Celery imports the -A module and the task modules with the
current directory first on sys.path, so a `worker.py` or `app/` of the user's own in the folder
where `torchyard up` was started took the place of ours. Here the app and its tasks are imported
before Celery looks (it then finds them loaded), and -P keeps that folder off sys.path for
everything else.

`worker` without `--concurrency` gets the configured threads raised to GPUs + 1 (with every
GPU leased, one thread is left for gpus: 0 runs and for re-asking about waiting runs). Without
`--queues` it consumes its pool's queue (TORCHYARD_WORKER_POOL: app.broker.pool_queue; the
`local` pool's is the shared default queue) and its host's own (app.broker.host_queue). The
worker says at start what it found: its pool, this host's GPUs and whether jobs are sandboxed.
"""

import os
import sys

from app.broker import celery_app, host_queue, pool_queue
from app.settings import PRIVATE_UMASK, get_settings
from worker import (
    slots,
    tasks,  # noqa: F401  (registers the tasks before Celery's own import)
)
from worker.job_policy import announce_isolation
from worker.runner import inventory


def concurrency() -> int:
    return max(get_settings().worker_concurrency, len(inventory().gpus) + 1)


def with_build_threads(argv: list[str]) -> list[str]:
    """`--concurrency N` is N run slots (worker.slots); Celery gets N more threads for the
    runs whose environments build meanwhile (env_build_concurrency), which hold no run slot."""
    runs, rest, args = concurrency(), [], iter(argv)
    for arg in args:
        if arg == "--concurrency":
            runs = int(next(args))
        elif arg.startswith("--concurrency="):
            runs = int(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    builds = get_settings().env_build_concurrency
    slots.configure(runs, builds)
    return [*rest, "--concurrency", str(runs + builds)]


def main(argv: list[str]) -> int:
    os.umask(PRIVATE_UMASK)
    if argv[:1] == ["worker"]:
        found = inventory()
        pool = get_settings().worker_pool
        print(
            f"worker on {found.host}, pool {pool!r}: GPUs {list(found.gpus) or 'none'} "
            f"({found.source})",
            flush=True,
        )
        announce_isolation()
        argv = with_build_threads(argv)
        if not any(a in ("-Q", "--queues") or a.startswith("--queues=") for a in argv):
            # Its pool's queue, and this host's own: a multi-node run's nodes (app.broker).
            queues = f"{pool_queue(pool)},{host_queue(found.host)}"
            argv = [*argv, "--queues", queues]
    status = celery_app.start(argv)
    return int(status or 0)


sys.exit(main(sys.argv[1:]))
