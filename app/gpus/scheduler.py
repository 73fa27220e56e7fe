"""Who may start now: a pure decision over the queue and the free GPUs of each host.

Rules, in this order:
- queued runs are considered by (priority desc, created_at, id);
- a run needing k GPUs starts only when k GPUs of ONE host are free, and gets exactly those
  (the lowest free indices of the fullest host that fits: best fit keeps big holes for big
  runs; a host that asks about its own run is preferred for that run);
- a run that cannot fit yet does not stop smaller runs behind it (backfill), unless it has
  waited longer than `starvation_seconds`: then no GPU run behind it starts before it does;
- a run that needs more GPUs than any known host has can never fit: it blocks nobody (and a
  new run like it is refused: `never_fits` is that rule, for both);
- gpus: 0 runs need nothing and are never blocked;
- a run whose broker message is lost (app.runs.dispatch) can start only once it is sent again:
  it takes no GPUs here and never holds up another run, however long it has waited;
- with no host at all (known to be none: `capacity_by_host` empty) nothing starts, and every
  run waits for a worker to come.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

# Why a queued run whose message is lost waits (app.runs.dispatch sends it again).
MESSAGE_LOST = "its task's broker message was lost; it is being sent again"

# Why everything waits when no worker host is live (no host heartbeat within the lease ttl):
# the run page, the experiment page's runs table and the GPU panel all show these words.
NO_LIVE_HOST = (
    "no worker is running: start one with `torchyard up` / `torchyard worker`; "
    "the run starts once one is"
)


@dataclass(frozen=True)
class QueuedRun:
    id: int
    gpus: int
    priority: int
    created_at: datetime
    message_lost: bool = False


@dataclass(frozen=True)
class Placement:
    host: str | None  # None for a run without GPUs: any host may run it
    gpu_indices: tuple[int, ...]


@dataclass(frozen=True)
class Decision:
    starts: dict[int, Placement]
    # Why each run that may not start now waits ("no host has k free GPUs", ...).
    waiting: dict[int, str]


def queue_order(queue: Iterable[QueuedRun]) -> list[QueuedRun]:
    return sorted(queue, key=lambda r: (-r.priority, r.created_at, r.id))


def pick(
    queue: Sequence[QueuedRun],
    free_by_host: Mapping[str, Iterable[int]],
    now: datetime,
    starvation_seconds: float,
    *,
    capacity_by_host: Mapping[str, int] | None = None,
    asking: tuple[int, str] | None = None,
) -> Decision:
    """Every run of `queue` that may start now, and where; `asking` = (run id, host) prefers
    that host for that run when it fits there."""
    free = {host: sorted(set(indices)) for host, indices in free_by_host.items()}
    starts: dict[int, Placement] = {}
    waiting: dict[int, str] = {}
    if capacity_by_host is not None and not capacity_by_host:
        return Decision(starts, {run.id: NO_LIVE_HOST for run in queue})
    blocker: QueuedRun | None = None
    for run in queue_order(queue):
        if run.message_lost:
            waiting[run.id] = MESSAGE_LOST
            continue
        if run.gpus == 0:
            starts[run.id] = Placement(None, ())
            continue
        if blocker is not None:
            waiting[run.id] = f"run {blocker.id} has waited too long; it starts first"
            continue
        host = _choose_host(run, free, asking)
        if host is not None:
            taken = tuple(free[host][: run.gpus])
            free[host] = free[host][run.gpus :]
            starts[run.id] = Placement(host, taken)
            continue
        # Unknown capacities: assume any run may fit some day.
        never = never_fits(run.gpus, capacity_by_host) if capacity_by_host is not None else None
        if never is not None:
            waiting[run.id] = never
            continue
        waiting[run.id] = f"waiting for {run.gpus} free GPUs on one host"
        if (now - run.created_at).total_seconds() > starvation_seconds:
            blocker = run
    return Decision(starts, waiting)


def never_fits(gpus: int, capacity_by_host: Mapping[str, int]) -> str | None:
    """Why a run asking for `gpus` GPUs can never start on these hosts (GPUs per host), or
    None when it may: it needs none, a host has that many, or no host is known at all (a
    worker may yet come with any number, so nothing says it never will)."""
    if gpus <= 0 or not capacity_by_host:
        return None
    largest = max(capacity_by_host.values())
    if gpus <= largest:
        return None
    return f"needs {gpus} GPUs on one host; no host has that many (the most on one host: {largest})"


def _choose_host(
    run: QueuedRun, free: Mapping[str, list[int]], asking: tuple[int, str] | None
) -> str | None:
    fitting = [host for host, indices in free.items() if len(indices) >= run.gpus]
    if not fitting:
        return None
    if asking is not None and asking[0] == run.id and asking[1] in fitting:
        return asking[1]
    return min(fitting, key=lambda host: (len(free[host]), host))
