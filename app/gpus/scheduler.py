"""Who may start now: a pure decision over the queue and the free GPUs of each host.

Rules, in this order:
- queued runs are considered by (priority desc, created_at, id); with fair share (`FairShare`,
  issue 42) runs of equal priority go by their owner's effective usage first (ascending), and
  each run taken in line charges its owner ahead (`queue_order`), so one user's runs do not
  all jump ahead of another's in one decision;
- a run needing k GPUs starts only when k GPUs of ONE host are free, and gets exactly those
  (the lowest free indices of the fullest host that fits: best fit keeps big holes for big
  runs; a host that asks about its own run is preferred for that run);
- a run that cannot fit yet does not stop smaller runs behind it (backfill), unless it has
  waited longer than `starvation_seconds`: then no GPU run behind it starts before it does;
- a run that needs more GPUs than any known host has can never fit: it blocks nobody (and a
  new run like it is refused: `never_fits` is that rule, for both);
- gpus: 0 runs need nothing and are never blocked;
- a run whose broker message is lost (app.runs.state.dispatch) can start only once it is sent again,
  and one whose message waits in the broker while every worker is busy only once a worker takes
  it: either takes no GPUs here and never holds up another run, however long it has waited;
- with no host at all (known to be none: `capacity_by_host` empty) nothing starts, and every
  run waits for a worker to come.

Pools (issue 40, `pick_pools`): each pool is scheduled on its own, by these rules, over its own
hosts only; a run of a pool with no live host waits with a reason that names the pool.

Multi-node runs (gang scheduling, `nodes` > 1; docs/multi-node.md):
- a run of N nodes needing k GPUs on each starts only when N different hosts each have k free
  GPUs, and then gets all N hosts' GPUs in this one decision (the asking host, when it is one
  of them, is node 0; the others best fit, as above); until then it holds none: no run ever
  holds part of its GPUs while it waits, so two multi-node runs can never deadlock;
- a multi-node run that cannot start yet reserves its k GPUs on each of the N hosts it would
  start on soonest (those with the most free GPUs; ties by name): a run behind it may take a
  GPU on such a host only while the k reserved there stay free, so backfill never delays it
  past its turn; on the other hosts backfill goes on as for any waiting run (reservations add
  up when several multi-node runs wait);
- one that cannot fit yet names each host it lacks and what ("a: 1 of 2 free, needs 1 more");
- one that needs more hosts with k GPUs than are known can never fit: it blocks and reserves
  nothing (`never_fits`);
- nodes > 1 with gpus: 0 needs N live hosts and no GPUs: it is never blocked, like gpus: 0.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from app.settings_pools import LOCAL_POOL

# Why a queued run whose message is lost waits (app.runs.state.dispatch sends it again).
MESSAGE_LOST = "its task's broker message was lost; it is being sent again"
# Why a queued run whose message is in the broker's queue, not taken yet, waits (issue 39).
WAITING_FOR_SLOT = (
    "waiting for a free worker slot: its message is in the broker's queue and every worker "
    "thread is busy"
)

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
    message_waiting: bool = False  # its message is in the broker, no worker has taken it yet
    nodes: int = 1  # hosts it spans, `gpus` GPUs on each
    pool: str = LOCAL_POOL  # only hosts of this pool run it
    owner_id: int = 0  # whose run: fair share orders equal priorities by owner


@dataclass(frozen=True)
class FairShare:
    """Each owner's effective usage now (decayed GPU-hours / weight, running runs charged
    their expected length: app.gpus.fairshare) and what one more GPU started charges them."""

    usage: Mapping[int, float]
    charge: Mapping[int, float]  # per GPU of a run taken in line; absent: 0


NodePlacement = tuple[str, tuple[int, ...]]  # (host, its GPU indices) of one node


@dataclass(frozen=True)
class Placement:
    host: str | None  # None for a run without GPUs: any host may run it; node 0's
    gpu_indices: tuple[int, ...]  # on `host`
    # A multi-node run's every node in rank order, (host, GPU indices); () for one host.
    nodes: tuple[NodePlacement, ...] = ()


@dataclass(frozen=True)
class Decision:
    starts: dict[int, Placement]
    # Why each run that may not start now waits ("no host has k free GPUs", ...).
    waiting: dict[int, str]


def queue_order(
    queue: Iterable[QueuedRun],
    fair: FairShare | None = None,
    *,
    now: datetime | None = None,
    starvation_seconds: float | None = None,
) -> list[QueuedRun]:
    """The one order of the queue (the scheduler's, the GPU panel's place in line, the start
    estimates'): (priority desc, created_at, id); with `fair`, equal priorities by owner's
    effective usage first, each run taken charging its owner `charge` per GPU before the next
    is chosen. A GPU run waiting longer than `starvation_seconds` (at `now`) goes before fair
    share's choices of its priority: fair share never starves a heavy user's big run."""
    static = sorted(queue, key=lambda r: (-r.priority, r.created_at, r.id))
    if fair is None:
        return static
    by_owner: dict[int, list[QueuedRun]] = {}
    for run in reversed(static):  # each owner's list: its next run last
        by_owner.setdefault(run.owner_id, []).append(run)
    usage = {owner: fair.usage.get(owner, 0.0) for owner in by_owner}

    def key(owner: int) -> tuple[int, float, datetime, int]:
        run = by_owner[owner][-1]
        starving = (
            now is not None
            and starvation_seconds is not None
            and run.gpus > 0
            and (now - run.created_at).total_seconds() > starvation_seconds
        )
        return (-run.priority, -math.inf if starving else usage[owner], run.created_at, run.id)

    order = []
    while by_owner:
        owner = min(by_owner, key=key)
        run = by_owner[owner].pop()
        if not by_owner[owner]:
            del by_owner[owner]
        usage[owner] += fair.charge.get(owner, 0.0) * run.gpus * run.nodes
        order.append(run)
    return order


def pick(
    queue: Sequence[QueuedRun],
    free_by_host: Mapping[str, Iterable[int]],
    now: datetime,
    starvation_seconds: float,
    *,
    capacity_by_host: Mapping[str, int] | None = None,
    asking: tuple[int, str] | None = None,
    fair: FairShare | None = None,
) -> Decision:
    """Every run of `queue` that may start now, and where; `asking` = (run id, host) prefers
    that host for that run when it fits there; `fair`: fair share's order (`queue_order`)."""
    free = {host: sorted(set(indices)) for host, indices in free_by_host.items()}
    starts: dict[int, Placement] = {}
    waiting: dict[int, str] = {}
    if capacity_by_host is not None and not capacity_by_host:
        return Decision(starts, {run.id: NO_LIVE_HOST for run in queue})
    # GPUs per host kept free for the waiting multi-node runs seen so far.
    reserved: dict[str, int] = {}
    blocker: QueuedRun | None = None
    for run in queue_order(queue, fair, now=now, starvation_seconds=starvation_seconds):
        if run.message_lost or run.message_waiting:
            waiting[run.id] = MESSAGE_LOST if run.message_lost else WAITING_FOR_SLOT
            continue
        # Unknown capacities: assume any run may fit some day.
        never = (
            never_fits(run.gpus, capacity_by_host, nodes=run.nodes)
            if capacity_by_host is not None
            else None
        )
        if run.gpus == 0 and run.nodes == 1:
            starts[run.id] = Placement(None, ())
            continue
        if blocker is not None and run.gpus > 0:
            waiting[run.id] = f"run {blocker.id} has waited too long; it starts first"
            continue
        usable = {h: len(indices) - reserved.get(h, 0) for h, indices in free.items()}
        hosts = _choose_hosts(run, usable, asking)
        if hosts is not None:
            nodes = []
            for host in hosts:
                nodes.append((host, tuple(free[host][: run.gpus])))
                free[host] = free[host][run.gpus :]
            starts[run.id] = Placement(*nodes[0], nodes=tuple(nodes) if run.nodes > 1 else ())
            continue
        if never is not None:
            waiting[run.id] = never
            continue
        if run.nodes == 1:
            waiting[run.id] = f"waiting for {run.gpus} free GPUs on one host"
        else:
            waiting[run.id] = _gang_reason(run, usable, capacity_by_host)
            for host in _soonest_hosts(run, usable, capacity_by_host):
                reserved[host] = reserved.get(host, 0) + run.gpus
        if run.gpus > 0 and (now - run.created_at).total_seconds() > starvation_seconds:
            blocker = run
    return Decision(starts, waiting)


def no_live_worker(pool: str, *, ever_served: bool) -> str:
    """Why a run of a pool that no live worker serves waits (the API's, the GPU panel's and the
    run page's words)."""
    never = "" if ever_served else " (no worker has ever served it)"
    return (
        f"no live worker serves pool '{pool}'{never}: start a worker with "
        f"TORCHYARD_WORKER_POOL={pool}; the run starts once one is"
    )


def scheduled_outside(pool: str, executor: str) -> str:
    """Why a run of a pool that an outside scheduler serves (a `slurm` worker) waits before its
    worker hands it over: torchyard places none of its GPUs, the outside scheduler will."""
    return (
        f"waiting for pool '{pool}'s {executor} worker to submit it: {executor.capitalize()}"
        " schedules this pool's runs and their GPUs"
    )


def pick_pools(
    queue: Sequence[QueuedRun],
    free_by_host: Mapping[str, Iterable[int]],
    pool_of_host: Mapping[str, str],
    now: datetime,
    starvation_seconds: float,
    *,
    capacity_by_host: Mapping[str, int],
    served: Collection[str] = (),
    asking: tuple[int, str] | None = None,
    outside: Mapping[str, str] | None = None,
    fair: FairShare | None = None,
) -> Decision:
    """`pick` for each pool on its own hosts (`pool_of_host`: the live hosts' pools), merged.
    A run of a pool without a live host waits naming its pool (`served`: the pools a worker
    has ever served); with no live host at all, the local pool's runs wait for a worker
    (NO_LIVE_HOST) as before pools existed. A pool that an outside scheduler serves
    (`outside`: pool -> its live workers' executor) is not placed here: its runs wait for
    their worker's claim, which hands them to that scheduler."""
    starts: dict[int, Placement] = {}
    waiting: dict[int, str] = {}
    by_pool: dict[str, list[QueuedRun]] = {}
    for run in queue:
        by_pool.setdefault(run.pool, []).append(run)
    for pool, runs in by_pool.items():
        hosts = {h for h, p in pool_of_host.items() if p == pool}
        if outside and pool in outside:
            waiting.update((run.id, scheduled_outside(pool, outside[pool])) for run in runs)
            continue
        if not hosts:
            reason = (
                NO_LIVE_HOST
                if pool == LOCAL_POOL and not capacity_by_host
                else no_live_worker(pool, ever_served=pool in served)
            )
            waiting.update((run.id, reason) for run in runs)
            continue
        decision = pick(
            runs,
            {h: free for h, free in free_by_host.items() if h in hosts},
            now,
            starvation_seconds,
            capacity_by_host={h: n for h, n in capacity_by_host.items() if h in hosts},
            asking=asking,
            fair=fair,
        )
        starts.update(decision.starts)
        waiting.update(decision.waiting)
    return Decision(starts, waiting)


def never_fits(gpus: int, capacity_by_host: Mapping[str, int], *, nodes: int = 1) -> str | None:
    """Why a run asking for `gpus` GPUs on each of `nodes` hosts can never start on these
    hosts (GPUs per host), or None when it may: enough hosts have that many, or no host is
    known at all (a worker may yet come with any number, so nothing says it never will)."""
    if not capacity_by_host or (gpus <= 0 and nodes == 1):
        return None
    if nodes == 1:
        largest = max(capacity_by_host.values())
        if gpus <= largest:
            return None
        return (
            f"needs {gpus} GPUs on one host; no host has that many "
            f"(the most on one host: {largest})"
        )
    big = sorted(h for h, capacity in capacity_by_host.items() if capacity >= gpus)
    if len(big) >= nodes:
        return None
    if gpus <= 0:
        return f"needs {nodes} hosts; only {len(capacity_by_host)} are live"
    return (
        f"needs {nodes} hosts with {gpus} GPUs each; only {len(big)} of the "
        f"{len(capacity_by_host)} live hosts have that many"
        + (f" ({', '.join(big)})" if big else "")
    )


def _choose_hosts(
    run: QueuedRun, usable: Mapping[str, int], asking: tuple[int, str] | None
) -> list[str] | None:
    """The hosts a run starts on now, node 0 first, or None: one host for a single-host run,
    `nodes` different ones for a multi-node run (never fewer)."""
    fitting = sorted(
        (h for h, n in usable.items() if run.gpus == 0 or n >= run.gpus),
        key=lambda h: (usable[h], h),
    )
    if len(fitting) < run.nodes:
        return None
    if asking is not None and asking[0] == run.id and asking[1] in fitting:
        fitting.remove(asking[1])
        fitting.insert(0, asking[1])
    return fitting[: run.nodes]


def _soonest_hosts(
    run: QueuedRun, usable: Mapping[str, int], capacity_by_host: Mapping[str, int] | None
) -> list[str]:
    """The hosts a waiting multi-node run will start on soonest: those big enough with the
    most free GPUs now (the ones its reservation keeps)."""
    big = [h for h in usable if capacity_by_host is None or capacity_by_host.get(h, 0) >= run.gpus]
    return sorted(big, key=lambda h: (-usable[h], h))[: run.nodes]


def _gang_reason(
    run: QueuedRun, usable: Mapping[str, int], capacity_by_host: Mapping[str, int] | None
) -> str:
    """Which hosts a waiting multi-node run lacks and what: free GPUs counted after those kept
    for multi-node runs ahead of it."""
    head = f"waiting for {run.nodes} hosts with {run.gpus} free GPUs each"
    if len(usable) < run.nodes:
        return f"{head}: only {len(usable)} live"
    lacking = []
    for host in _soonest_hosts(run, usable, capacity_by_host):
        have = max(0, usable[host])
        if have < run.gpus:
            lacking.append(f"{host}: {have} of {run.gpus} free, needs {run.gpus - have} more")
    return f"{head}: " + "; ".join(lacking)
