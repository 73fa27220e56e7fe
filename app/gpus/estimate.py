"""When each queued run will start: the scheduler's own decision, replayed forward in time.

Pure: no database. The running runs hold their GPUs until their expected ends; at each end
(earliest first) their GPUs come free and `pick_pools` (app.gpus.scheduler, the very decision
the workers take: its queue order, backfill, starvation, gangs and pools) says which queued
runs start then; each one started holds its GPUs for its own expected length. A run that
starts in this replay gets the time it started at; one that never does (a run ahead of it, or
holding its GPUs, has no known length; it can never fit; its pool has no worker) gets no time
and a basis that says why, rather than a wrong time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from app.gpus.scheduler import FairShare, Placement, QueuedRun, pick_pools

# The start of a run that may start as soon as a worker takes it.
FREE_NOW = "its GPUs are free now"
# The grains a live page's copy of an estimate is kept to (seconds), finest first: each
# estimate to the coarsest grain of at most a tenth of its wait (steady_mark).
MARK_GRAINS = (15, 30, 60, 120, 300, 600, 1800, 3600)


@dataclass(frozen=True)
class Length:
    """How long a run is expected to hold its GPUs (None: not known), and from what."""

    seconds: float | None
    basis: str


@dataclass(frozen=True)
class Holder:
    """A running run: the GPUs it holds, (host, index), and when it is expected to end."""

    run_id: int
    gpus: tuple[tuple[str, int], ...]
    end: datetime | None
    basis: str  # what the end comes from ("its progress: step 40 of 100", ...)


@dataclass(frozen=True)
class Estimate:
    start: datetime | None  # None: no estimate (the basis says why)
    basis: str


@dataclass(frozen=True)
class Fleet:
    """The hosts as the scheduler sees them now: free GPUs, pools, capacities."""

    free: Mapping[str, Collection[int]]
    pools: Mapping[str, str]
    capacity: Mapping[str, int]
    served: Collection[str] = ()
    outside: Mapping[str, str] | None = None
    fair: FairShare | None = None  # fair share's usage now (None: off)


def steady_mark(start: datetime | None, basis: str | None, now: datetime) -> list[object]:
    """What of an estimate a live page redraws on. An estimate moves with the clock (a run
    whose GPUs are free now starts "now"; a run behind one past its expected end, at "now"),
    so a stream that compared the estimates themselves resent every queued run at each poll.
    The mark holds the start to a grain of about a tenth of the wait (at least 15 s): it
    changes when the estimate moves by that much, or when the wait shrinks to the next grain."""
    if start is None or basis == FREE_NOW:
        return [basis]
    wait = max((start - now).total_seconds(), 0.0)
    grain = max([g for g in MARK_GRAINS if g <= wait / 10] or [MARK_GRAINS[0]])
    return [basis, grain, int(start.timestamp() // grain)]


def simulate(
    queue: Sequence[QueuedRun],
    holders: Sequence[Holder],
    lengths: Mapping[int, Length],
    fleet: Fleet,
    now: datetime,
    starvation_seconds: float,
) -> dict[int, Estimate]:
    """Each queued run's estimated start. A lost or untaken broker message is taken as sent:
    it delays a run by the broker's seconds, not by a turn."""
    pending = [dataclasses.replace(r, message_lost=False, message_waiting=False) for r in queue]
    free = {host: set(indices) for host, indices in fleet.free.items()}
    running = list(holders)
    estimates: dict[int, Estimate] = {}
    waiting: dict[int, str] = {}
    t, cause = now, FREE_NOW
    fair = fleet.fair
    while pending:
        decision = pick_pools(
            pending,
            {h: sorted(i) for h, i in free.items()},
            fleet.pools,
            t,
            starvation_seconds,
            capacity_by_host=fleet.capacity,
            served=fleet.served,
            outside=fleet.outside,
            fair=fair,
        )
        waiting = decision.waiting
        for run_id, placement in decision.starts.items():
            estimates[run_id] = Estimate(t, cause)
            gpus = _gpus_of(placement)
            for host, index in gpus:
                free[host].discard(index)
            length = lengths.get(run_id, Length(None, "no known length"))
            end = None if length.seconds is None else t + timedelta(seconds=length.seconds)
            running.append(Holder(run_id, gpus, end, length.basis))
        fair = _charged(fair, [r for r in pending if r.id in decision.starts])
        pending = [r for r in pending if r.id not in decision.starts]
        ending = [h for h in running if h.end is not None and h.gpus]
        if not pending or not ending:
            break
        first = min(ending, key=lambda h: (h.end or t, h.run_id))
        t = max(t, first.end or t)
        cause = f"when run {first.run_id} ends ({first.basis})"
        for done in [h for h in running if h.end is not None and h.end <= t]:
            running.remove(done)
            for host, index in done.gpus:
                free.setdefault(host, set()).add(index)
    for run in pending:
        estimates[run.id] = Estimate(None, _why_none(run, waiting.get(run.id, ""), running, fleet))
    return estimates


def _charged(fair: FairShare | None, started: Sequence[QueuedRun]) -> FairShare | None:
    """Fair share's usage after the replay started `started`: each owner charged as the
    scheduler charges a run taken in line, so the next decision of the replay sees it."""
    if fair is None or not started:
        return fair
    usage = dict(fair.usage)
    for run in started:
        charge = fair.charge.get(run.owner_id, 0.0) * run.gpus * run.nodes
        usage[run.owner_id] = usage.get(run.owner_id, 0.0) + charge
    return FairShare(usage=usage, charge=fair.charge)


def _gpus_of(placement: Placement) -> tuple[tuple[str, int], ...]:
    if placement.host is None:
        return ()
    nodes = placement.nodes or ((placement.host, placement.gpu_indices),)
    return tuple((host, index) for host, indices in nodes for index in indices)


def _why_none(run: QueuedRun, reason: str, running: Sequence[Holder], fleet: Fleet) -> str:
    """The words of a run with no estimate: the run of unknown length it waits behind (one
    holding GPUs of its pool, the lowest id), else the scheduler's reason."""
    unknown = sorted(
        h.run_id
        for h in running
        if h.end is None and any(fleet.pools.get(host) == run.pool for host, _ in h.gpus)
    )
    if unknown and not reason.startswith("needs "):
        return f"no estimate: run {unknown[0]} has no known length"
    return f"no estimate: {reason}" if reason else "no estimate"
