"""torchyard's own lines in a run's output.log (a cancel, skipped TensorBoard data, files
stored): appended by the worker beside the job's lines. The job's descriptor is opened with
O_APPEND too, so whole lines never overwrite each other; the forwarder ships them like the
job's own."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import BinaryIO

from torchyard.contract import LOG_FILE

log = logging.getLogger(__name__)


def open_run_file(path: Path, *, truncate: bool = False) -> BinaryIO:
    """A file of a run's folder opened by the worker for writing (appending unless
    `truncate`): never through a link and never a FIFO or a device. The folder belongs to the
    run's job (its uid when the worker is root, worker/sandbox.py), which may have put a link
    to any file there, and the worker, maybe root, would write through it; or a FIFO, and the
    open would block. OSError (ELOOP, ENXIO, ...) when the file is not a regular one."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        os.set_blocking(fd, True)
        if truncate:
            os.ftruncate(fd, 0)
        return os.fdopen(fd, "ab", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def note_in_log(run_dir: Path, *lines: str) -> None:
    try:
        with open_run_file(run_dir / LOG_FILE) as out:
            out.write("".join(f"torchyard: {line}\n" for line in lines).encode())
    except OSError:
        log.exception("could not write to %s", run_dir / LOG_FILE)
