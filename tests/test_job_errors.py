"""A failed run's error: the first failing rank's record (written by torchyard.job), read as
hostile input; else the last traceback of the output; else the exit code."""

from __future__ import annotations

import json
import os
from pathlib import Path

from worker.job_errors import error_tail, first_failure, run_error


def record(errors: Path, rank: int, at: float, message: str) -> None:
    errors.mkdir(exist_ok=True)
    body = {"rank": rank, "time": at, "type": "X", "message": message, "traceback": "Traceback"}
    (errors / f"rank{rank}.json").write_text(json.dumps(body))


def test_the_error_starts_with_the_first_failing_ranks_exception(tmp_path: Path) -> None:
    record(tmp_path / "errors", 0, 20.0, "RuntimeError: connection reset by peer")
    record(tmp_path / "errors", 1, 10.0, "ValueError: rank one cannot go on")
    error = run_error(tmp_path, tmp_path / "output.log", 1)
    assert error.splitlines()[0] == "ValueError: rank one cannot go on"
    assert "(rank 1) Traceback" in error


def test_hostile_records_are_passed_over(tmp_path: Path) -> None:
    errors = tmp_path / "errors"
    errors.mkdir()
    (errors / "list.json").write_text("[1]")
    (errors / "types.json").write_text('{"rank": "0", "time": 1, "message": 3, "traceback": ""}')
    (errors / "nan.json").write_text('{"rank": 0, "time": NaN, "message": "m", "traceback": ""}')
    (errors / "huge.json").write_text(" " * (300 * 1024) + "{}")
    os.mkfifo(errors / "fifo.json")  # would block a plain open for ever
    secret = tmp_path / "secret.json"
    secret.write_text('{"rank": 0, "time": 0, "message": "LEAK", "traceback": ""}')
    os.symlink(secret, errors / "link.json")
    assert first_failure(errors) is None
    record(errors, 2, 5.0, "OSError: the real one")
    assert first_failure(errors) == {
        "rank": 2,
        "time": 5.0,
        "message": "OSError: the real one",
        "traceback": "Traceback",
    }


def test_without_a_record_the_log_or_the_exit_code_says_it(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    assert run_error(tmp_path, log, -9) == "the job exited with code -9"
    log.write_text("Traceback (most recent call last):\n  File x\nMemoryError\n")
    assert run_error(tmp_path, log, 1).endswith("MemoryError")


def test_a_doubly_prefixed_traceback_is_read_as_the_ranks(tmp_path: Path) -> None:
    """torch's excepthook prefixes the rank when the script set up the process group, and
    torchrun prefixes every line again."""
    log = tmp_path / "output.log"
    log.write_text(
        "[rank1]: [rank1]: Traceback (most recent call last):\n"
        '[rank1]: [rank1]:   File "train.py", line 3\n'
        "[rank1]: [rank1]: ValueError: twice\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: To enable traceback\n"
    )
    assert error_tail(log) == (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "train.py", line 3\n'
        "[rank1]: ValueError: twice"
    )


def test_error_is_the_last_traceback(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text(
        "starting\nTraceback (most recent call last):\n  old\nValueError: a\n"
        "more\nTraceback (most recent call last):\n  File x\nRuntimeError: boom\n"
    )
    assert error_tail(log) == "Traceback (most recent call last):\n  File x\nRuntimeError: boom"


def test_under_torchrun_the_error_is_the_failing_ranks_traceback(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text(
        "[rank0]: step 1\n"
        "[rank1]: Traceback (most recent call last):\n"
        "[rank0]: step 2\n"
        '[rank1]:   File "train.py", line 3\n'
        "[rank1]: RuntimeError: rank 1 broke\n"
        "Traceback (most recent call last):\n"
        "  File torch/distributed/run.py\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: worker failed\n"
    )
    assert error_tail(log) == (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "train.py", line 3\n'
        "[rank1]: RuntimeError: rank 1 broke"
    )


def test_missing_log_gives_no_error_text(tmp_path: Path) -> None:
    assert error_tail(tmp_path / "nope.log") == ""
