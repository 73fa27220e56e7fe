"""torchyard's own lines in a run's output.log (a cancel, skipped TensorBoard data, files
stored): appended by the worker beside the job's lines. The job's descriptor is opened with
O_APPEND too, so whole lines never overwrite each other; the forwarder ships them like the
job's own."""

from __future__ import annotations

import logging
from pathlib import Path

from torchyard.contract import LOG_FILE

log = logging.getLogger(__name__)


def note_in_log(run_dir: Path, *lines: str) -> None:
    try:
        with open(run_dir / LOG_FILE, "ab") as out:
            out.write("".join(f"torchyard: {line}\n" for line in lines).encode())
    except OSError:
        log.exception("could not write to %s", run_dir / LOG_FILE)
