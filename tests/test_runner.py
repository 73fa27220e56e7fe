from __future__ import annotations

from pathlib import Path

from worker.runner import error_tail


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
