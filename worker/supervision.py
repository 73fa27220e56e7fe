"""The one loop that supervises a run attempt on this host, whatever it waits for (issue 38).

A worker keeps a claimed run alive while something long happens for it: its job trains (a
single host, or any node of a multi-node run: worker.watch), its environment is built
(worker.env_build), its code snapshot is unpacked or the job base made (`while_supervised`),
its nodes meet (worker.node_run), its files are stored. Each of these is a `Supervised` thing
(a job's processes, a build that can be stopped, a step that cannot) watched by `supervise`:

    every round: a pause (the interval, doubled while the database is away: worker.backoff),
    then the steps plugged in, in order (worker.supervision_steps: limits guard, system
    series, environment record, forward, early stop, the build's last line, check-in), each
    writing what it saw into `Seen`; then `decide`.

`decide` is the one decision tree for all of them, in this order:

1. a limit hit (the guard saw one): stopped after the cancel grace, LIMIT;
2. the run no longer this attempt's (NOT_OWNED): stopped at once, FENCED (the GPUs may be
   another attempt's now), unless it ended by itself meanwhile: its exit status speaks;
3. a cancel requested, or the run deleted: stopped after the cancel grace (at once for a
   sweep's trial its early-stopping rule just stopped: its GPUs go to the next trial), CANCEL;
4. the worker shutting down: left running for the next worker (DETACH) where the policy lets
   it (a job, `keep_jobs_on_worker_stop`), else stopped once the policy's shutdown grace is
   over, SHUTDOWN; a policy without one (a wait that ends by itself) goes on;
5. otherwise the next round, until the supervised thing ends by itself (None).

What differs between the loops is only which steps are plugged in and the `Policy`; nothing
here knows whether it watches a job or a thread.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from app.runs.state.answers import Standing
from app.settings import get_settings
from worker.backoff import Backoff
from worker.heartbeat import Watched, stops_as_cancelled
from worker.process import JobProcess

log = logging.getLogger(__name__)

# Set when the worker begins a warm shutdown: running jobs are left to train on for the next
# worker (keep_jobs_on_worker_stop), or get shutdown_grace_seconds to end, then are stopped,
# and their runs requeued (max_restarts) or failed with the reason.
SHUTTING_DOWN = threading.Event()


class StopReason(enum.Enum):
    """Why the loop stopped what it supervised before it ended by itself."""

    CANCEL = "cancel"  # the run's cancel was requested (or the run was deleted)
    SHUTDOWN = "shutdown"  # the worker shuts down and the grace period is over
    DETACH = "detach"  # the worker stops and leaves the job to the next one (it trains on)
    FENCED = "fenced"  # the run is no longer this attempt's (reaped while the worker stalled)
    LIMIT = "limit"  # the job hit one of its run's limits (worker.limits): memory, processes, disk


@dataclass
class Seen:
    """What the steps saw: this round's check-in answer and limit hit, and what holds from
    one round to the next."""

    standing: Standing | None = None  # the check-in's answer; None: not asked or not answered
    unanswered: bool = False  # the check-in could not ask the database (it may be away)
    hit: str | None = None  # the limit the job passed (worker.limits.Guard)
    backlog: bool = False  # the spool holds more than a batch: the next round at once
    stopped_early: bool = False  # kept: a later round's check-in may miss (the database away)
    shutdown_since: float | None = None  # when this loop first saw the worker shutting down

    def next_round(self) -> None:
        self.standing, self.unanswered, self.hit, self.backlog = None, False, None, False


Step = Callable[[Seen], None]


@dataclass(frozen=True)
class Policy:
    """How a loop's supervised thing is stopped: the cancel grace its processes get, whether a
    worker shutdown may leave it running (a job the next worker re-adopts), and how long a
    shutdown waits for it to end by itself (None: a shutdown does not end this loop)."""

    cancel_grace: float
    detach: bool = False
    shutdown_grace: float | None = 0.0


@dataclass(frozen=True)
class Decision:
    reason: StopReason
    grace: float | None  # the stop's grace in seconds; None: not stopped (left running)


def decide(seen: Seen, policy: Policy, *, ended: bool, now: float) -> Decision | None:
    """The decision tree (the module's docstring); None: go on. Pure: the loop acts on it."""
    if seen.hit is not None:
        return Decision(StopReason.LIMIT, policy.cancel_grace)
    if seen.standing is Standing.NOT_OWNED:
        return None if ended else Decision(StopReason.FENCED, 0.0)
    if seen.standing is not None and stops_as_cancelled(seen.standing):
        return Decision(StopReason.CANCEL, 0.0 if seen.stopped_early else policy.cancel_grace)
    if seen.shutdown_since is not None and policy.shutdown_grace is not None:
        if policy.detach:
            return Decision(StopReason.DETACH, None)
        if now - seen.shutdown_since >= policy.shutdown_grace:
            return Decision(StopReason.SHUTDOWN, policy.cancel_grace)
    return None


class Supervised(Protocol):
    def ended(self) -> bool: ...

    def pause(self, seconds: float) -> None:
        """Wait `seconds`, or less once it has ended."""

    def stop(self, grace: float, reason: StopReason) -> bool:
        """Stop it; True once it is stopped, False when it cannot be (the loop then goes on
        heartbeating until it ends, and answers the reason)."""


class JobTarget:
    """A job's processes (worker.process): stopped whole, SIGTERM then SIGKILL."""

    def __init__(self, job: JobProcess) -> None:
        self.job = job

    def ended(self) -> bool:
        return self.job.poll() is not None

    def pause(self, seconds: float) -> None:
        time.sleep(seconds)

    def stop(self, grace: float, reason: StopReason) -> bool:
        self.job.stop(grace)
        return True


class ThreadTarget:
    """Work in a thread of this worker: a build that `halt` stops (pip's processes killed),
    or, without `halt`, a step that cannot be stopped and is waited for."""

    def __init__(
        self, thread: threading.Thread, halt: Callable[[StopReason], None] | None = None
    ) -> None:
        self.thread = thread
        self.halt = halt

    def ended(self) -> bool:
        return not self.thread.is_alive()

    def pause(self, seconds: float) -> None:
        self.thread.join(timeout=seconds)

    def stop(self, grace: float, reason: StopReason) -> bool:
        if self.halt is None:
            return False
        self.halt(reason)
        return True


_SAID = {  # what the worker's log says as the loop acts (the run's own log says it elsewhere)
    StopReason.LIMIT: "%s: %s",
    StopReason.FENCED: "%s: its attempt was handed over",
    StopReason.CANCEL: "%s: cancel requested",
    StopReason.SHUTDOWN: "%s: the worker shuts down",
    StopReason.DETACH: "%s: the worker stops; left running for the next worker",
}


def supervise(
    what: str, target: Supervised, steps: Sequence[Step], policy: Policy, *, interval: float
) -> StopReason | None:
    """Round after round until `target` ends by itself (None) or the decision tree stops it
    (its reason). `what` names it in the worker's log ("run 7", "run 7 node 1's job")."""
    backoff = Backoff(interval)
    seen = Seen()
    stopped: StopReason | None = None  # a target that cannot be stopped is waited for
    while not target.ended():
        if not seen.backlog:  # a backlog goes on at once: its turn at the gate is its pause
            target.pause(backoff.delay)
            if target.ended():
                break
        seen.next_round()
        for step in steps:
            step(seen)
            if seen.hit is not None:  # the limit first: nothing else matters this round
                break
        if seen.unanswered:  # the database may be briefly away; the spool keeps everything
            backoff.failed()
        else:
            backoff.succeeded()
        if stopped is not None:
            continue
        if SHUTTING_DOWN.is_set() and seen.shutdown_since is None:
            seen.shutdown_since = time.monotonic()
            if policy.shutdown_grace and not policy.detach:
                log.warning("%s: the worker shuts down; %.0f s left", what, policy.shutdown_grace)
        decision = decide(seen, policy, ended=target.ended(), now=time.monotonic())
        if decision is None:
            continue
        level = logging.INFO if decision.reason is StopReason.CANCEL else logging.WARNING
        log.log(level, _SAID[decision.reason], what, *([seen.hit] if seen.hit else []))
        if decision.grace is None or target.stop(decision.grace, decision.reason):
            return decision.reason
        stopped = decision.reason
    return stopped


T = TypeVar("T")


class _Work(Generic[T]):
    def __init__(self, work: Callable[[], T]) -> None:
        self.work = work
        self.done: list[T] = []
        self.failed: list[BaseException] = []

    def __call__(self) -> None:
        try:
            self.done.append(self.work())
        except BaseException as exc:
            self.failed.append(exc)


def while_supervised(
    run: Watched, work: Callable[[], T], steps: Sequence[Step]
) -> tuple[T, StopReason | None]:
    """`work()` in a thread while the loop runs `steps` (the check-in at least): a step before
    the job starts that may outlast run_lost_seconds on a busy host (unpacking a large
    snapshot, a fresh data dir's job base) must not get the run, or a multi-node run's node,
    counted lost. It cannot be stopped halfway, so it is waited for; what the loop decided
    meanwhile (a cancel, a hand-over, a shutdown) is answered with its result, for the caller
    to act on before the next step."""
    job = _Work(work)
    thread = threading.Thread(target=job, name=f"run-{run.run_id}-step", daemon=True)
    thread.start()
    settings = get_settings()
    every = max(0.05, settings.forwarder_interval_seconds)
    policy = Policy(cancel_grace=settings.cancel_grace_seconds)
    stopped = supervise(f"run {run.run_id}", ThreadTarget(thread), steps, policy, interval=every)
    thread.join()
    if job.failed:
        raise job.failed[0]
    return job.done[0], stopped
