"""torchyard's own lines in a run's output.log (a cancel, skipped TensorBoard data, files
stored): appended by the worker beside the job's lines. The job's descriptor is opened with
O_APPEND too, so whole lines never overwrite each other; the forwarder ships them like the
job's own."""

from __future__ import annotations

import logging
from pathlib import Path

from app.runs.files.job_files import append_to_job_file
from torchyard.contract import RunPaths

log = logging.getLogger(__name__)


def note_in_log(run_dir: Path, *lines: str) -> None:
    text = "".join(f"torchyard: {line}\n" for line in lines).encode()
    # Only into a regular file: the job may have put a FIFO (opening it would wait for a
    # reader) or a link to another file in its place.
    if not append_to_job_file(RunPaths(run_dir).log, text):
        log.warning("could not write to %s (not a regular file)", RunPaths(run_dir).log)
