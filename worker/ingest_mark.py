"""The worker's side of the spool's backpressure: tell the job how far its spool is ingested.

After every committed batch (an empty one too: a round of the watch loop that found nothing
new) the watch loop writes
``metrics.ingested`` in the run directory: "<offset> <inode> <share>", the spool's bytes stored
so far, which file they are of, and the backlog this job may hold (the bound shared among the
runs this worker ingests). The job's reporter holds back while its backlog past that
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
import threading
import time
from pathlib import Path

from torchyard.contract import RunPaths

log = logging.getLogger(__name__)


# Runs whose marks this worker wrote lately (spool path -> monotonic time): the runs it is
# ingesting now, among which the backlog bound is shared.
_published: dict[Path, float] = {}
_published_lock = threading.Lock()
# A run counts as being ingested while its mark was written within this many seconds (the watch
# loop writes it every round, after every batch or wait at the gate).
LIVE_SECONDS = 5.0
# The least share: a run's backlog never goes below this, so neither do its batches. Each
# batch has a fixed cost (its transaction's commit rewrites the pages its keys' rows end in,
# and each key's overview is rewritten whole): twelve runs at a 64 KiB share moved ~4,000
# points a batch and ingested at a third of one run's rate; at 512 KiB, ~12,000 points a
# batch, 1.4x more points per CPU second on SQLite (bench/flood.py, issue 27). The whole
# backlog is then runs x 512 KiB past four runs: still about a second of ingestion at twelve.
MIN_SHARE = 512 * 1024


def share(total: int, metrics_path: Path) -> int:
    """This run's part of the backlog bound ``total``: an equal share among the runs this
    worker is ingesting. Each flooding job holding the whole bound made a point wait for every
    run's backlog before its own turn (12 jobs: a minute's lag on a loaded box, bench/flood.py);
    shared, the worker's whole backlog stays about ``total``, a second or so of ingestion, and
    one run alone keeps it all."""
    now = time.monotonic()
    with _published_lock:
        _published[metrics_path] = now
        for path, at in list(_published.items()):
            if now - at > LIVE_SECONDS:
                del _published[path]
        runs = len(_published)
    return max(MIN_SHARE, total // runs)


def publish(metrics_path: Path, offset: int, share: int | None = None) -> None:
    """Write the mark: ``offset`` bytes of the spool at ``metrics_path`` are ingested; with
    ``share``, the backlog the job may hold now (the launcher's bound is its ceiling)."""
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
            extra = "" if share is None else f" {share}"
            os.write(fd, f"{offset} {inode}{extra}\n".encode())
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except OSError as exc:
        log.debug("could not write the ingestion mark %s: %s", target, exc)
        try:
            tmp.unlink()
        except OSError:
            pass
