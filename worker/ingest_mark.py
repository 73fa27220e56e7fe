"""The worker's side of the spool's backpressure: tell the job how far its spool is ingested.

After every committed batch (an empty one too: a round of the watch loop that found nothing
new) the watch loop writes
``metrics.ingested`` in the run directory: "<offset> <inode>", the spool's bytes stored so
far and which file they are of. The job's reporter holds back while its backlog past that
offset exceeds its bound (torchyard.runtime.ingest_mark); a mark that is not refreshed (this
worker gone or frozen, the database away, a batch failing, no turn at the gate for
spool_mark_fresh_seconds) lets it spool freely again.

The run directory is the job's (under the sandbox, its uid's): the mark is written to a new
file (O_EXCL, no link followed) and renamed over the old one, so nothing the job put there
(a link, a FIFO) is ever written through. Only the job reads the mark, so a job that tampers
with it only changes its own pace. Failing to write it is never an error: the job then
spools as it would without a worker.
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

from torchyard.contract import RunPaths

log = logging.getLogger(__name__)


def publish(metrics_path: Path, offset: int) -> None:
    """Write the mark: ``offset`` bytes of the spool at ``metrics_path`` are ingested."""
    try:
        inode = os.lstat(metrics_path).st_ino
    except OSError:
        return  # no spool yet: nothing to hold back
    target = RunPaths(metrics_path.parent).ingested
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            os.fchmod(fd, 0o644)  # the job's uid reads it (the worker's umask may be 077)
            os.write(fd, f"{offset} {inode}\n".encode())
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except OSError as exc:
        log.debug("could not write the ingestion mark %s: %s", target, exc)
        try:
            tmp.unlink()
        except OSError:
            pass
