"""A run's spool across attempts: what a requeued run's next attempt does before it starts.

The reaper (app.runs.recovery) kept every point up to the checkpoint the run resumes from and
dropped the ones after it, which the new attempt logs again. Lines of the old attempt that
were never forwarded are past that checkpoint (a checkpoint line is forwarded only after every
line before it), so they are superseded: the old spool is set aside, not replayed, and so are
the unread parts of its TensorBoard event files. Without this, the old attempt's values for
those steps would win (a point is unique per step, first one kept).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from sqlalchemy.orm import Session

from app.runs.models import Run
from torchyard.contract import LOG_FILE, METRICS_FILE
from worker.run_log import open_run_file
from worker.tensorboard_events import clear_cache, find_event_files

log = logging.getLogger(__name__)


def _continue_log(run: Run, log_path: Path) -> None:
    """The new attempt's output continues the run's log. On another host the local file is
    new, but the log shipped so far (runs.log_offset bytes) is the run's: the local file is
    extended to that size (a sparse hole, no bytes written) so shipping resumes after it."""
    size = log_path.stat().st_size if log_path.exists() else 0
    with open_run_file(log_path) as f:
        if size < run.log_offset:
            f.truncate(run.log_offset)
        f.write(f"=== torchyard: attempt {run.attempt} of run {run.id} ===\n".encode())


def start_attempt(session: Session, run_id: int, run_dir: Path) -> None:
    run = session.get(Run, run_id, populate_existing=True)
    if run is None:
        return
    spool = run_dir / METRICS_FILE
    if spool.exists():
        aside = run_dir / f"metrics.attempt-{run.attempt - 1}.jsonl"
        os.replace(spool, aside)
        log.info("run %s attempt %d: previous spool kept as %s", run_id, run.attempt, aside.name)
    run.metrics_offset = 0
    _continue_log(run, run_dir / LOG_FILE)
    files, _dirs = find_event_files(run_dir)
    run.tb_offsets = {rel: (run_dir / rel).stat().st_size for rel in files}
    clear_cache()
    session.flush()
