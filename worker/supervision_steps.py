"""The steps plugged into the supervision loop (worker.supervision): each does one thing per
round and writes what the decision tree needs into the round's `Seen`.

Every step that writes goes through the loop's one `IngestSteps` (worker.ingest_steps): its own
unit of work, a database that is away retried next round, any other error said once on the
run and paused. Whatever a step does, the check-in (`CheckIn`, the loop's last step) runs: the
run keeps heartbeating and sees its cancel.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from app.runs.state import phase
from app.settings import get_settings
from app.sweeps import early_stop
from worker import ingest_mark, provenance
from worker.forwarder import Moved, forward
from worker.heartbeat import Heartbeat, Watched
from worker.ingest_gate import Turn
from worker.ingest_steps import IngestSteps
from worker.limits import Guard
from worker.process import JobProcess
from worker.supervision import Seen
from worker.system_metrics import SystemSeries


class CheckIn:
    """The attempt's check-in (worker.heartbeat): its heartbeat (node k's: its node's) when
    due, and its standing, which the decision tree acts on."""

    def __init__(self, run: Watched) -> None:
        self.heartbeat = Heartbeat(run)

    def __call__(self, seen: Seen) -> None:
        seen.standing = self.heartbeat.check()
        seen.unanswered = seen.standing is None


class Limits:
    """The job against its run's limits (worker.limits.Guard); `on_hit` is told the first
    hit at once, before the job is stopped (node k records it: worker.node_run)."""

    def __init__(
        self, guard: Guard, job: JobProcess, on_hit: Callable[[str], None] | None = None
    ) -> None:
        self.guard, self.job, self.on_hit = guard, job, on_hit

    def __call__(self, seen: Seen) -> None:
        seen.hit = self.guard.check(self.job)
        if seen.hit is not None and self.on_hit is not None:
            self.on_hit(seen.hit)
            self.on_hit = None


class System:
    """The job's CPU, memory and GPUs, written by the worker (not spooled), labelled with
    the node (app.metrics.system_series)."""

    def __init__(self, ingest: IngestSteps, run: Watched, job: JobProcess, host: str) -> None:
        settings = get_settings()
        self.ingest, self.job = ingest, job
        self.series = SystemSeries(
            run.run_id,
            interval=settings.system_metrics_interval_seconds,
            summary_interval=settings.gpu_summary_seconds,
            node=run.node or 0,
            host=host,
            cgroup=run.limits.cgroup if run.limits is not None else (),
        )

    def __call__(self, seen: Seen) -> None:
        if self.series.due():
            members = self.job.members()
            self.ingest.step("system series", lambda s: self.series.record(s, members), 0)


class RecordEnvironment:
    """The job's own environment record merged into the run's, once rank 0 has written it
    (node 0's: its job's rank 0 writes it)."""

    def __init__(self, ingest: IngestSteps, run: Watched) -> None:
        self.ingest, self.run = ingest, run
        self.recorded = False

    def __call__(self, seen: Seen) -> None:
        if not self.recorded:
            run = self.run
            self.recorded = self.ingest.step(
                "record the environment",
                lambda s: provenance.merge_job_record(
                    s, run_id=run.run_id, run_dir=run.metrics_path.parent
                ),
                default=False,
            )


class Forward:
    """One batch of the spool (node k: of its log) to the database (worker.forwarder). With
    `turn`, the batch waits its turn at the ingestion gate; with `mark`, the job is told what
    was committed (its reporter holds back while far ahead: worker.ingest_mark)."""

    def __init__(
        self, ingest: IngestSteps, run: Watched, *, turn: Turn | None = None, mark: bool = False
    ) -> None:
        self.ingest, self.run, self.turn, self.mark = ingest, run, turn, mark
        self.moved = Moved(0)
        self.ingested: int | None = None  # the spool's committed offset, as last told to the job

    def __call__(self, seen: Seen) -> None:
        run = self.run
        self.moved = moved = self.ingest.step(
            "forward",
            lambda s: forward(
                s,
                run_id=run.run_id,
                metrics_path=run.metrics_path,
                attempt=run.attempt,
                node=run.node or 0,
            ),
            Moved(0),
            turn=self.turn,
        )
        seen.backlog = moved.more
        if not self.mark:
            return
        # Committed (an empty batch too): tell the job; again after a wait at the gate (this
        # worker is alive, only busy with other runs' turns). Not after a failed or refused
        # batch, nor while the database is away: the mark then goes stale, and the job spools
        # freely, as without a worker.
        self.ingested = self.ingested if moved.offset is None else moved.offset
        if self.ingested is not None and (moved.offset is not None or self.ingest.no_turn):
            settings = get_settings()
            ingest_mark.publish(
                run.metrics_path,
                self.ingested,
                ingest_mark.share(settings.spool_backlog_bytes, run.metrics_path),
            )


def early_stop_requested(ingest: IngestSteps, run_id: int) -> bool:
    """Judge a sweep's trial by its sweep's early-stopping rule (app.sweeps.early_stop): True
    when it was just stopped (its cancel requested, the reason said on the run)."""
    return ingest.step("early stop", lambda s: early_stop.check(s, run_id=run_id), None) is not None


class EarlyStop:
    """A sweep's trial judged as its points arrive. Its own transaction, committed before the
    check-in sees the cancel it requests; the trial is then stopped without a grace."""

    def __init__(self, ingest: IngestSteps, run: Watched, batches: Forward) -> None:
        self.ingest, self.run, self.batches = ingest, run, batches

    def __call__(self, seen: Seen) -> None:
        if self.batches.moved and not seen.stopped_early:
            seen.stopped_early = early_stop_requested(self.ingest, self.run.run_id)


class ShowLine:
    """A build's last output line as the run's phase (app.runs.state.phase.build_progress): the
    API, `submit --follow` and the run page show what pip is doing."""

    def __init__(self, ingest: IngestSteps, run: Watched, line: Callable[[], str]) -> None:
        self.ingest, self.run, self.line = ingest, run, line
        self.shown = ""

    def __call__(self, seen: Seen) -> None:
        line = self.line()
        if line and line != self.shown:
            self.shown = line
            show = functools.partial(
                phase.build_progress, run_id=self.run.run_id, attempt=self.run.attempt, line=line
            )
            self.ingest.step("show the build's last line", show, False)
