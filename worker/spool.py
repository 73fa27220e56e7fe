"""A run's spool across attempts: what a requeued run's next attempt does before it starts.

The reaper (app.runs.state.recovery) kept every point up to the checkpoint the run resumes from and
dropped the ones after it, which the new attempt logs again. Lines of the old attempt that
were never forwarded are past that checkpoint (a checkpoint line is forwarded only after every
line before it), so they are superseded: the old spool is set aside, not replayed, and so are
the unread parts of its TensorBoard event files. Without this, the old attempt's values for
those steps would win (a point is unique per step, first one kept).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from app.db import Session
from app.runs.files.job_files import append_to_job_file, cut_job_file, job_file_size
from app.runs.state.attempts import NextAttempt, restart_spool
from torchyard.contract import RunPaths
from worker.tensorboard_events import clear_cache, find_event_files

log = logging.getLogger(__name__)


def _continue_log(run_id: int, next_attempt: NextAttempt, log_path: Path) -> None:
    """The new attempt's output continues the run's log. On another host the local file is
    new, but the log shipped so far (runs.log_offset bytes) is the run's: the local file is
    extended to that size (a sparse hole, no bytes written) so shipping resumes after it.
    Whatever the last attempt's job left there that is not a regular file (a FIFO, a link)
    is removed first: the new job's output is opened at that name."""
    if job_file_size(log_path) is None and os.path.lexists(log_path):
        if os.path.isdir(log_path) and not os.path.islink(log_path):
            shutil.rmtree(log_path, ignore_errors=True)
        else:
            log_path.unlink(missing_ok=True)
    append_to_job_file(log_path, b"")
    if (job_file_size(log_path) or 0) < next_attempt.log_offset:
        cut_job_file(log_path, next_attempt.log_offset)
    append_to_job_file(
        log_path, f"=== torchyard: attempt {next_attempt.attempt} of run {run_id} ===\n".encode()
    )


def start_attempt(session: Session, run_id: int, run_dir: Path) -> None:
    """Set the old attempt's spool aside and start reading afresh (app.runs.state.attempts); the
    event files are read on from where they end now."""
    files, _dirs = find_event_files(run_dir)
    tb_offsets = {rel: job_file_size(run_dir / rel) or 0 for rel in files}
    started = restart_spool(session, run_id=run_id, tb_offsets=tb_offsets)
    if started is None:
        return
    spool = RunPaths(run_dir).metrics
    if spool.exists():
        aside = RunPaths(run_dir).earlier_metrics(started.attempt - 1)
        os.replace(spool, aside)
        log.info(
            "run %s attempt %d: previous spool kept as %s", run_id, started.attempt, aside.name
        )
    _continue_log(run_id, started, RunPaths(run_dir).log)
    clear_cache()
