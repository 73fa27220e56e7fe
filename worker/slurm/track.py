"""One run attempt's Slurm job, from its submission (or its re-adoption by a restarted worker)
to the run's final status: the supervision loop of every local job (worker.supervision) over
a `SlurmJobTarget`, with the steps of a Slurm job.

    every round: squeue/sacct (worker.slurm.commands.query) for the job's state; while Slurm
    holds it pending, its reason and start estimate as the run's queue reason; once it runs,
    the training start; then the spool's next batch (worker.supervision_steps.Forward: from
    the run's folder on the shared filesystem, resuming at the database's offset, so a
    re-adopted run loses and doubles nothing) and the check-in (a cancel: scancel).

A worker shutdown leaves the job to Slurm (DETACH): the next worker of the pool re-adopts it.

Where neither squeue nor sacct knows the job (no accounting, ended past `MinJobAge`), its end
is the batch step's record (`recorded_end`): srun's exit status, written after srun returns by
the batch script into the attempt's folder of the data dir (worker.slurm.batch.JobFiles
.exit_record). A member's code cannot forge it: the batch step runs as the job's submitter
(root or the service's account) before any privilege drop and outside the sandbox; the job's
processes run in bwrap, where the data dir is hidden (worker.slurm.boundary), and a root
worker's job as the run's uid, which cannot write the folder (0700, the submitter's) either.
The record names its Slurm job id: an earlier job's record is not read for a later one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from app.runs.state import lifecycle, phase
from app.runs.state.status import RunStatus
from app.settings import get_settings
from torchyard.contract import RunPaths
from worker.db_retry import with_db
from worker.heartbeat import Watched
from worker.ingest_gate import Turn
from worker.ingest_steps import IngestSteps
from worker.job_errors import run_error
from worker.run_log import note_in_log
from worker.slurm import boundary, commands
from worker.slurm.commands import SlurmError, SlurmJob
from worker.supervise import finish, forget_attempt, hand_over_stopped
from worker.supervision import Policy, Seen, Step, StopReason, supervise
from worker.supervision_steps import CheckIn, EarlyStop, Forward
from worker.watch import drain

log = logging.getLogger(__name__)

PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED"}
STARTED = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING"}
# Slurm took the job from its nodes: the attempt is handed over (requeued per max_restarts).
LOST = {"NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
# How long a cancelled job may take to end before the run is finished anyway.
CANCEL_WAIT_SECONDS = 8.0


class SlurmJobTarget:
    """A Slurm job as the supervision loop's `Supervised`: its state read at each pause."""

    def __init__(self, job_id: str, record: Path | None = None) -> None:
        self.job_id = job_id
        self.record = record
        self.last: SlurmJob | None = None
        self.unknown_since: float | None = None
        self.refresh()

    def refresh(self) -> None:
        try:
            found = commands.query([self.job_id]).get(self.job_id)
        except SlurmError as exc:  # slurmctld busy or away: the next round asks again
            log.warning("slurm job %s: query failed: %s", self.job_id, exc)
            return
        if found is None and self.record is not None:
            found = recorded_end(self.record, self.job_id)
        if found is None:  # not (or no longer) known to squeue nor sacct, and no record
            self.unknown_since = self.unknown_since or time.monotonic()
        else:
            self.last, self.unknown_since = found, None

    def ended(self) -> bool:
        if self.last is not None and self.last.ended:
            return True
        # A job Slurm forgot (no accounting, past MinJobAge) for a while: it has ended.
        return self.unknown_since is not None and time.monotonic() - self.unknown_since > 30

    def pause(self, seconds: float) -> None:
        time.sleep(seconds)
        self.refresh()

    def stop(self, grace: float, reason: StopReason) -> bool:
        # scancel sends SIGTERM to every step, then SIGKILL after the cluster's KillWait.
        commands.cancel(self.job_id)
        return True


def recorded_end(record: Path, job_id: str) -> SlurmJob | None:
    """The job's end as its batch step recorded it ("job=<id> exit=<code>"): COMPLETED for
    srun's 0, FAILED otherwise; None without a record of this job (none written: the batch
    step was cancelled or its node lost, which Slurm itself reports while it knows the job)."""
    try:
        words = record.read_text().split()
    except OSError:
        return None
    fields = dict(word.split("=", 1) for word in words if "=" in word)
    code = fields.get("exit", "")
    if fields.get("job") != job_id or not code.isdigit():
        return None
    state = "COMPLETED" if int(code) == 0 else "FAILED"
    reason = "Slurm no longer knows the job; its batch script recorded srun's exit status"
    return SlurmJob(job_id, "", "", state, reason, None, int(code), None, ())


@dataclass
class Waiting:
    """The step that writes what Slurm says of the job: its pending reason (the run's queue
    reason), then, once, the training start."""

    run: Watched
    target: SlurmJobTarget
    said: str | None = None
    started: bool = False

    def __call__(self, seen: Seen) -> None:
        job = self.target.last
        if job is None:
            return
        run = self.run
        if job.state in PENDING:
            reason = f"Slurm: {job.reason or job.state}"
            if job.start_estimate is not None:
                reason += f"; expected to start {job.start_estimate:%Y-%m-%d %H:%M} UTC"
            if reason != self.said:
                self._write(reason)
            return
        if not self.started:
            self.started = True
            self._write(None)
            with_db(
                run.run_id,
                "record the training start",
                lambda s: phase.training(s, run_id=run.run_id, attempt=run.attempt),
            )

    def _write(self, reason: str | None) -> None:
        run, job_id = self.run, self.target.job_id
        with_db(
            run.run_id,
            "record the Slurm job",
            lambda s: lifecycle.hand_over(
                s, run_id=run.run_id, attempt=run.attempt, external_id=job_id, reason=reason
            ),
        )
        self.said = reason


def track(run: Watched, job_id: str, *, started: bool = False) -> RunStatus:
    """From the attempt's submitted job to the run's final status (running: left to the next
    worker)."""
    settings = get_settings()
    target = SlurmJobTarget(job_id, boundary.job_files(run.run_id, run.attempt).exit_record)
    ingest = IngestSteps(run.run_id)
    batches = Forward(ingest, run, turn=Turn.LIVE, mark=True)
    steps: list[Step] = [Waiting(run, target, started=started), batches]
    if run.in_sweep:
        steps.append(EarlyStop(ingest, run, batches))
    steps.append(CheckIn(run))
    policy = Policy(cancel_grace=settings.cancel_grace_seconds, detach=True)
    every = max(0.2, settings.forwarder_interval_seconds)
    what = f"run {run.run_id}'s Slurm job {job_id}"
    stopped = supervise(what, target, steps, policy, interval=every)
    if stopped is StopReason.DETACH:
        log.warning("run %s: the worker stops; Slurm job %s is left to Slurm", run.run_id, job_id)
        return RunStatus.running
    if stopped is not None:  # scancel'ed: its end is waited for, so its last lines ship
        deadline = time.monotonic() + CANCEL_WAIT_SECONDS
        while not target.ended() and time.monotonic() < deadline:
            target.pause(0.2)
    if stopped is StopReason.FENCED:
        forget_attempt(run)
        return RunStatus.queued
    run_dir = run.metrics_path.parent
    if stopped is StopReason.CANCEL:
        note_in_log(run_dir, f"the run was cancelled; Slurm job {job_id} cancelled")
    drain(run)
    forget_attempt(run)
    return final_status(run, target.last, stopped, job_id)


def _nodes_down(job: SlurmJob) -> str:
    """Slurm's reason for each of the job's nodes that has one ("; node-3: disk on fire", an
    operator's `scontrol update ... reason=`), or nothing (back in service, sinfo unanswered)."""
    try:
        reasons = commands.node_reasons(job.nodes)
    except SlurmError as exc:
        log.warning("slurm job %s: its nodes' state unread: %s", job.job_id, exc)
        return ""
    return "".join(f"; {node}: {why}" for node, why in sorted(reasons.items()))


def final_status(
    run: Watched, job: SlurmJob | None, stopped: StopReason | None, job_id: str
) -> RunStatus:
    """The run's end from what Slurm last said of its job (`job`: None if never seen)."""
    run_dir = run.metrics_path.parent
    code = job.exit_code if job is not None else None
    if stopped is StopReason.CANCEL:
        return finish(run.run_id, RunStatus.cancelled, code, None, attempt=run.attempt)
    if job is None:
        error = f"Slurm job {job_id} ended unseen (Slurm no longer knows it)"
        return finish(run.run_id, RunStatus.failed, None, error, attempt=run.attempt)
    why = f"Slurm job {job_id}: {job.state}" + (f" ({job.reason})" if job.reason else "")
    if job.state in LOST:
        why += _nodes_down(job)
        note_in_log(run_dir, why)
        return hand_over_stopped(run.run_id, attempt=run.attempt, reason=why)
    # COMPLETED is every process's exit 0 to Slurm: so also where no exit code is read (squeue's
    # text format of a Slurm before --json, and no accounting to ask).
    if job.state == "COMPLETED" and code in (0, None):
        return finish(run.run_id, RunStatus.succeeded, 0, None, attempt=run.attempt)
    if not job.ended:  # last seen live, then gone from squeue, and no accounting knows it
        why = (
            f"Slurm job {job_id} was last seen {job.state}, then Slurm no longer knew it (not in "
            "squeue; sacct has no record: no accounting storage?): its end is unknown"
        )
        note_in_log(run_dir, why)
    if job.state == "TIMEOUT":
        why += ": the run reached its Slurm time limit"
    error = run_error(run_dir, RunPaths(run_dir).log, code)  # the failing rank's exception
    if job.state in {"TIMEOUT", "OUT_OF_MEMORY", "CANCELLED"} or not job.ended:
        error = f"{why}\n\n{error}"
    return finish(run.run_id, RunStatus.failed, code, error, attempt=run.attempt)
