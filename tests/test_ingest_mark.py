"""The spool's backpressure (torchyard.runtime.ingest_mark, worker.ingest_mark): a reporter
holds back while the worker's fresh mark says it is far behind, and only then; the worker's
mark is never written through a link the job left."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.waits import wait_for
from torchyard.contract import SPOOL_BACKLOG_VAR, SPOOL_MARK_FRESH_VAR, SPOOL_MAX_AGE_VAR, RunPaths
from torchyard.runtime import ingest_mark
from torchyard.runtime.reporter import HELD_PENDING, Reporter
from worker.ingest_mark import MIN_SHARE, publish, share

BOUND = 64 * 1024
KEYS = {f"flood/k{i:02d}": 0.123456789 for i in range(20)}  # ~550 bytes a line
# A flooding job's steps where the total is not the point, only that the writer is held far
# past the bound and the loop waits in log(): the writer takes at most HELD_PENDING + 1 items
# a drain and log() waits past HELD_PENDING queued, so past 2,002 steps the loop is held.
# 3,000 (~1.6 MB: 25 times the launcher's bound, 5 times what a held writer may reach).
FLOOD_STEPS = 3_000


def log_steps(reporter: Reporter, steps: int, done: threading.Event) -> threading.Thread:
    """Log ``steps`` steps in a thread (a training loop); ``done`` once log() returned."""

    def loop() -> None:
        for step in range(1, steps + 1):
            reporter.log(step, KEYS)
        done.set()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


@contextmanager
def ingesting(spool: Path, share: int | None = None) -> Iterator[None]:
    """The worker's stand-in: its mark follows the spool (every 5 ms) until the block ends,
    close() included: a worker that stopped while the job closed let the writer out only
    once its mark went stale (fresh_seconds, 30 s of each test)."""
    stop = threading.Event()

    def follow() -> None:
        while not stop.is_set():
            publish(spool, size(spool), share)
            time.sleep(0.005)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)


def test_a_reporter_holds_back_while_the_worker_is_far_behind_and_goes_on_as_it_ingests(
    tmp_path: Path,
) -> None:
    spool = RunPaths(tmp_path).metrics
    reporter = Reporter(spool, interval=0.01, backlog_bytes=BOUND, fresh_seconds=30)
    spool.touch()
    publish(spool, 0)  # a worker that has ingested nothing yet
    done = threading.Event()
    log_steps(reporter, FLOOD_STEPS, done)  # ~1.6 MB: far past the bound
    wait_for(lambda: size(spool) > BOUND, timeout=30, every=0.01, what="first writes")
    time.sleep(0.5)  # the job keeps logging; the spool must not grow past the bound
    assert size(spool) <= BOUND + 256 * 1024 + 4096
    assert not done.is_set()  # the training loop waits in log()
    # The worker ingests (its mark follows the spool): the job goes on to the end.
    with ingesting(spool):
        assert done.wait(120)
        reporter.close()
    steps = [line for line in spool.read_text().splitlines() if line]
    assert len(steps) == FLOOD_STEPS  # nothing lost, nothing twice


def test_a_stale_mark_or_one_of_another_file_never_holds_a_job_up(tmp_path: Path) -> None:
    spool = RunPaths(tmp_path).metrics
    spool.touch()
    publish(spool, 0)
    old = time.time() - 60
    os.utime(RunPaths(tmp_path).ingested, (old, old))  # the worker froze or went away
    reporter = Reporter(spool, interval=0.01, backlog_bytes=BOUND, fresh_seconds=5)
    done = threading.Event()
    log_steps(reporter, 5_000, done).join(60)
    assert done.is_set()
    reporter.close()
    assert size(spool) > 10 * BOUND
    # A fresh mark of an earlier attempt's spool (another inode): not this file's offset.
    other = tmp_path / "metrics.attempt-1.jsonl"
    other.write_text("x")
    publish(other, 0)
    reporter = Reporter(spool, interval=0.01, backlog_bytes=BOUND, fresh_seconds=5)
    done = threading.Event()
    log_steps(reporter, 5_000, done).join(60)
    assert done.is_set()
    reporter.close()


def test_a_stopping_job_writes_everything_at_once(tmp_path: Path) -> None:
    spool = RunPaths(tmp_path).metrics
    spool.touch()
    publish(spool, 0)  # fresh, and nothing ingested: it holds back
    reporter = Reporter(spool, interval=0.01, backlog_bytes=BOUND, fresh_seconds=30)
    done = threading.Event()
    log_steps(reporter, 20_000, done)  # far more than one drain of the writer takes
    wait_for(lambda: size(spool) > BOUND, timeout=30, every=0.01, what="first writes")
    time.sleep(0.2)
    assert size(spool) <= BOUND + 256 * 1024 + 4096  # held back
    try:
        ingest_mark.stop_waiting()  # SIGTERM (torchyard.job): the grace must not be spent here
        assert done.wait(30)
        reporter.close()
    finally:
        ingest_mark._stopping.clear()
    assert len(spool.read_text().splitlines()) == 20_000


def test_the_worker_never_writes_its_mark_through_a_link_the_job_left(tmp_path: Path) -> None:
    spool = RunPaths(tmp_path).metrics
    spool.write_text("{}\n")
    victim = tmp_path / "victim"
    victim.write_text("the worker's own file")
    RunPaths(tmp_path).ingested.symlink_to(victim)
    umask = os.umask(0o077)  # the worker's (a service's umask is often 077)
    try:
        publish(spool, 3)
    finally:
        os.umask(umask)
    assert victim.read_text() == "the worker's own file"
    assert not RunPaths(tmp_path).ingested.is_symlink()
    mark = ingest_mark.read_mark(RunPaths(tmp_path).ingested, fresh_seconds=5)
    assert mark == (3, spool.stat().st_ino)
    assert RunPaths(tmp_path).ingested.stat().st_mode & 0o777 == 0o644  # the job's uid reads it
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_reporter_holds_back_while_its_oldest_point_not_stored_is_older_than_the_age_bound(
    tmp_path: Path,
) -> None:
    """The byte bound alone let a run that gets a twelfth of a loaded host's ingestion hold
    minutes of points: its viewers lagged 26-75 s (bench/flood.py, issue 27). With an age
    bound the writer also holds back while the oldest point it wrote and the worker has not
    stored was logged longer ago than the bound, however few bytes that is."""
    spool = RunPaths(tmp_path).metrics
    spool.touch()
    publish(spool, 0)  # a worker that has stored nothing of it yet
    reporter = Reporter(
        spool, interval=0.01, backlog_bytes=100 * BOUND, fresh_seconds=30, max_age_seconds=0.3
    )
    reporter.log(1, KEYS)
    reporter.flush()
    first = size(spool)
    assert first > 0  # nothing old was waiting: written at once
    time.sleep(0.4)  # that point is older than the bound now, and still not stored
    for step in range(2, 51):
        reporter.log(step, KEYS)  # a few KB: far below the byte bound
    time.sleep(0.3)
    assert size(spool) == first  # held back by age, not by bytes
    publish(spool, first)  # the worker stored the first point: the rest goes out
    wait_for(lambda: size(spool) > first, timeout=30, every=0.01, what="the held points")
    publish(spool, size(spool))
    reporter.close()
    assert len([line for line in spool.read_text().splitlines() if line]) == 50


def test_a_flooding_loop_never_queues_more_than_held_pending_items_in_memory(
    tmp_path: Path,
) -> None:
    """log() waited only while the writer held back for ingestion: while the writer slept
    between drains or encoded its last batch, a loop logging as fast as it can queued up to
    max_pending items, and one run alone lagged its viewers by 30 s (bench/flood.py, stop 37;
    0.7 s since)."""
    spool = RunPaths(tmp_path).metrics
    reporter = Reporter(spool, interval=0.15, backlog_bytes=100 * BOUND, fresh_seconds=30)
    most = 0
    for step in range(1, 20_001):
        reporter.log(step, KEYS)
        most = max(most, len(reporter._queue))
    reporter.close()
    assert most <= HELD_PENDING + 1, most
    assert len([line for line in spool.read_text().splitlines() if line]) == 20_000


def test_the_bound_comes_from_the_launchers_variables() -> None:
    env = {SPOOL_BACKLOG_VAR: "4096", SPOOL_MARK_FRESH_VAR: "7.5", SPOOL_MAX_AGE_VAR: "3"}
    assert ingest_mark.from_env(env) == (4096, 7.5, 3.0)
    assert ingest_mark.from_env({}) == (0, ingest_mark.DEFAULT_FRESH_SECONDS, 0.0)
    assert ingest_mark.from_env({SPOOL_BACKLOG_VAR: "lots"})[0] == 0


def test_the_worker_shares_the_bound_among_the_runs_it_ingests(tmp_path: Path) -> None:
    total = 2 * 1024 * 1024
    paths = [tmp_path / f"run{i}" / "metrics.jsonl" for i in range(4)]
    assert share(total, paths[0]) == total  # one run alone keeps it all
    assert share(total, paths[1]) == total // 2
    assert share(total, paths[0]) == total // 2  # the same run again is still one
    assert [share(total, p) for p in paths[2:]] == [total // 3, total // 4]
    assert share(MIN_SHARE, paths[0]) == MIN_SHARE  # never below the least share


def test_a_reporter_holds_back_at_the_workers_share_of_its_bound(tmp_path: Path) -> None:
    spool = RunPaths(tmp_path).metrics
    reporter = Reporter(spool, interval=0.01, backlog_bytes=BOUND, fresh_seconds=30)
    spool.touch()
    publish(spool, 0, BOUND // 8)  # twelve runs flooding this worker: a small share each
    done = threading.Event()
    log_steps(reporter, FLOOD_STEPS, done)
    wait_for(lambda: size(spool) > BOUND // 16, timeout=30, every=0.01, what="first writes")
    time.sleep(0.5)
    # The share, not the launcher's bound (64 KiB): past the share by at most the first chunk,
    # written before the writer first saw the share (a quarter of the launcher's bound).
    assert size(spool) <= BOUND // 8 + BOUND // 4 + 1024
    assert not done.is_set()  # the training loop waits in log()
    with ingesting(spool, BOUND // 8):
        assert done.wait(120)
        reporter.close()
    assert len(spool.read_text().splitlines()) == FLOOD_STEPS
