"""Fair share between users (issue 42): each user's recent GPU-hours, decayed with the admin's
half-life, divided by their weight, orders the queue among runs of equal priority.

A run's GPU time counts from its start to its end (a running run's up to now), GPUs times
seconds, each moment weighted 2^(-age / half-life): an hour of GPU time one half-life ago
counts half an hour. A running run is charged at least its expected length (its user's mean
finished run length in the window, else everyone's, else `fair_share_default_run_hours`) from
its start, so
that a run that has just started already counts: a user's two runs started a moment apart do
not both go ahead of someone else's. Effective usage = that / weight; weights: the user's
`share_weight` (an admin's, app.users.service.set_share_weight), else their role's
(`fair_share_role_weights`), else 1. The pure order is app.gpus.scheduler.queue_order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.gpus.scheduler import Decision, FairShare, QueuedRun
from app.gpus.schemas import FairShareOut, UserShareOut
from app.runs.models import Run, RunStatus
from app.settings import get_settings
from app.timeutil import as_utc

# Past this many half-lives a run's GPU time counts less than 0.1%: not read at all.
HORIZON_HALF_LIVES = 10


@dataclass(frozen=True)
class UserShare:
    user_id: int
    username: str
    own_weight: float | None
    gpu_hours: float  # decayed, running runs charged their expected length
    weight: float
    running_gpus: int
    expected_run_hours: float  # what a start is charged per GPU (before weight)

    @property
    def effective(self) -> float:
        """Decayed GPU-hours per unit of weight: the lower, the sooner its runs go."""
        return self.gpu_hours / self.weight


def enabled() -> bool:
    return get_settings().fair_share_half_life_hours > 0


def weight_of(user: User) -> float:
    """The user's weight: their own, else their role's, else 1."""
    if user.share_weight is not None:
        return float(user.share_weight)
    return float(get_settings().fair_share_role_weights.get(str(user.role), 1.0))


def decayed_hours(start: datetime, end: datetime, now: datetime, half_life_hours: float) -> float:
    """Hours in [start, end], each moment weighted 2^(-(now - moment) / half-life)."""
    if end <= start:
        return 0.0
    rate = math.log(2) / half_life_hours
    age_end = (now - end).total_seconds() / 3600
    age_start = (now - start).total_seconds() / 3600
    return (math.exp(-rate * age_end) - math.exp(-rate * age_start)) / rate


def shares(session: Session, *, now: datetime) -> dict[int, UserShare]:
    """Every user's share now: those who ran something within the horizon, and every other
    user with zero usage (a newcomer's runs go first)."""
    settings = get_settings()
    half_life = settings.fair_share_half_life_hours or 24.0
    since = now - timedelta(hours=half_life * HORIZON_HALF_LIVES)
    rows = session.execute(
        select(Run.owner_id, Run.started_at, Run.finished_at, Run.gpu_indices, Run.status)
        .where(Run.started_at.is_not(None), Run.gpu_indices.is_not(None))
        .where(or_(Run.finished_at > since, Run.status == RunStatus.running))
    ).all()
    used: dict[int, float] = {}
    lengths: dict[int, list[float]] = {}
    running: dict[int, list[tuple[datetime, int]]] = {}
    for owner, started_at, finished_at, indices, status in rows:
        gpus = len([i for i in (indices or "").split(",") if i])
        if not gpus or started_at is None:
            continue
        start = as_utc(started_at)
        if start >= now:  # recorded by a clock ahead of this one: nothing used yet
            continue
        if status == RunStatus.running and finished_at is None:
            running.setdefault(owner, []).append((start, gpus))
            continue
        if finished_at is None:  # queued again after a start: its GPU time is not known here
            continue
        end = min(as_utc(finished_at), now)
        used[owner] = used.get(owner, 0.0) + gpus * decayed_hours(start, end, now, half_life)
        # Only a run that ran its course says how long runs take: a cancelled one (or one whose
        # clock ran backwards) is a length of about 0, and a box mean of 0 charged a running
        # run nothing, so its owner's next run tied with the other user's first and jumped it.
        if status in (RunStatus.succeeded, RunStatus.failed) and end > start:
            lengths.setdefault(owner, []).append((end - start).total_seconds() / 3600)
    every = [span for spans in lengths.values() for span in spans]
    # A user without a finished run is charged the box's mean, like everyone else's measured
    # lengths: a flat default beside measured seconds would put a newcomer far behind.
    default = sum(every) / len(every) if every else settings.fair_share_default_run_hours
    out = {}
    for user in session.scalars(select(User)):
        spans = lengths.get(user.id)
        expected = sum(spans) / len(spans) if spans else default
        hours = used.get(user.id, 0.0)
        for start, gpus in running.get(user.id, ()):
            elapsed = max(0.0, (now - start).total_seconds() / 3600)
            hours += gpus * (
                decayed_hours(start, now, now, half_life) + max(0.0, expected - elapsed)
            )
        out[user.id] = UserShare(
            user_id=user.id,
            username=user.username,
            own_weight=user.share_weight,
            gpu_hours=hours,
            weight=weight_of(user),
            running_gpus=sum(g for _, g in running.get(user.id, ())),
            expected_run_hours=expected,
        )
    return out


def fair_share(session: Session, *, now: datetime) -> FairShare | None:
    """What the scheduler orders by (None: fair share is off)."""
    if not enabled():
        return None
    return as_fair(shares(session, now=now))


def as_fair(by_user: dict[int, UserShare]) -> FairShare:
    return FairShare(
        usage={uid: s.effective for uid, s in by_user.items()},
        charge={uid: s.expected_run_hours / s.weight for uid, s in by_user.items()},
    )


def _waits_for_gpus(reason: str) -> bool:
    """A reason about GPUs (free ones, or a starving run ahead), where fair share's order
    decides; not one about workers, lost messages or an outside scheduler."""
    if reason.startswith("run ") and "waited too long" in reason:
        return True
    return reason.startswith("waiting for ") and "worker" not in reason


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def describe(share: UserShare, others: list[UserShare], place: int) -> str:
    """The fair-share part of a queued run's reason: its owner's usage and weight, the lowest
    other user's waiting at its priority in its pool, and its place in line."""
    head = (
        f"fair share: {share.username} used {share.gpu_hours:.1f} GPU-h (weight {share.weight:g})"
    )
    if others:
        low = min(others, key=lambda s: (s.effective, s.username))
        head += f" vs {low.username} {low.gpu_hours:.1f} (weight {low.weight:g})"
    return f"{head} — {ordinal(place)} in line"


def annotate(decision: Decision, order: list[QueuedRun], by_user: dict[int, UserShare]) -> Decision:
    """`decision` with each waiting GPU run's reason followed by its fair-share line (`order`:
    the queue in `queue_order`, its place in line). Only where another user waits at its
    priority in its pool, and only for a wait on GPUs: elsewhere a share decides nothing."""
    waiting_users = {run.owner_id for run in order if run.id in decision.waiting}
    if len(waiting_users) < 2:
        return decision
    waiting = dict(decision.waiting)
    for place, run in enumerate(order, start=1):
        share = by_user.get(run.owner_id)
        if run.id not in waiting or share is None or run.gpus == 0:
            continue
        if not _waits_for_gpus(waiting[run.id]):  # no worker, a lost message, Slurm's pool
            continue
        rivals = {
            r.owner_id
            for r in order
            if r.id in waiting and r.priority == run.priority and r.pool == run.pool
        }
        others = [by_user[u] for u in rivals - {run.owner_id} if u in by_user]
        if not others:  # nobody else waits beside it: its share decides nothing
            continue
        waiting[run.id] = f"{waiting[run.id]}; {describe(share, others, place)}"
    return Decision(decision.starts, waiting)


def table(by_user: dict[int, UserShare], queue: list[QueuedRun]) -> FairShareOut:
    """The GPU page's and `GET /api/fair-share`'s table: every user running or waiting, or
    with usage left, lowest effective usage first; `share` is each one's due fraction of the
    GPUs among those running or waiting."""
    waiting: dict[int, int] = {}
    for run in queue:
        waiting[run.owner_id] = waiting.get(run.owner_id, 0) + 1
    listed = [
        s for uid, s in by_user.items() if s.gpu_hours > 0.0005 or s.running_gpus or uid in waiting
    ]
    active = [s for s in listed if s.running_gpus or s.user_id in waiting]
    total = sum(s.weight for s in active) or 1.0
    users = [
        row(s, share=s.weight / total if s in active else 0.0, queued=waiting.get(s.user_id, 0))
        for s in sorted(listed, key=lambda s: (s.effective, s.username))
    ]
    return FairShareOut(half_life_hours=get_settings().fair_share_half_life_hours, users=users)


def row(user: UserShare, *, share: float = 0.0, queued: int = 0) -> UserShareOut:
    """One user's line of the table (`share`: their due fraction among those active)."""
    return UserShareOut(
        user_id=user.user_id,
        username=user.username,
        gpu_hours=round(user.gpu_hours, 4),
        weight=user.weight,
        own_weight=user.own_weight,
        effective=round(user.effective, 4),
        share=round(share, 4),
        running_gpus=user.running_gpus,
        queued_runs=queued,
    )
