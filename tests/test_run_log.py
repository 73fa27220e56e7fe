"""worker/run_log.py: the worker's writes into a run's folder, which the run's job controls."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from worker.run_log import note_in_log, open_run_file


def test_the_worker_never_writes_through_a_link_the_job_left(tmp_path: Path) -> None:
    """A root worker appending its cancel note through output.log -> the database would
    corrupt it; the note is refused (and logged) instead."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    database = tmp_path / "torchyard.db"
    database.write_bytes(b"SQLite format 3\0")
    (run_dir / "output.log").symlink_to(database)
    (run_dir / "config.json").symlink_to(database)
    note_in_log(run_dir, "the run was cancelled")
    with pytest.raises(OSError):
        open_run_file(run_dir / "config.json", truncate=True)
    assert database.read_bytes() == b"SQLite format 3\0"


def test_a_fifo_in_a_run_folder_is_refused_at_once_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "output.log")
    with pytest.raises(OSError):
        open_run_file(tmp_path / "output.log")


def test_a_regular_file_is_appended_to_or_replaced(tmp_path: Path) -> None:
    note_in_log(tmp_path, "one")
    note_in_log(tmp_path, "two", "three")
    assert (tmp_path / "output.log").read_text() == (
        "torchyard: one\ntorchyard: two\ntorchyard: three\n"
    )
    (tmp_path / "config.json").write_text('{"old": "and longer"}')
    with open_run_file(tmp_path / "config.json", truncate=True) as out:
        out.write(b"{}")
    assert (tmp_path / "config.json").read_text() == "{}"
