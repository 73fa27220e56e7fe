"""worker/run_log.py and the run-folder writers it uses (app/runs/files/job_files.py): the worker's
writes into a run's folder, which the run's job controls."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.runs.files.job_files import FileRefused, open_job_file_for_append, replace_job_file
from worker.run_log import note_in_log


def test_the_worker_never_writes_through_a_link_the_job_left(tmp_path: Path) -> None:
    """A root worker appending its cancel note through output.log -> the database would
    corrupt it; the note is refused (and logged) instead, and config.json is replaced, not
    written through."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    database = tmp_path / "torchyard.db"
    database.write_bytes(b"SQLite format 3\0")
    (run_dir / "output.log").symlink_to(database)
    (run_dir / "config.json").symlink_to(database)
    note_in_log(run_dir, "the run was cancelled")
    with pytest.raises(OSError):
        open_job_file_for_append(run_dir / "output.log")
    replace_job_file(run_dir / "config.json", b"{}")
    assert database.read_bytes() == b"SQLite format 3\0"
    assert not (run_dir / "config.json").is_symlink()


def test_a_fifo_in_a_run_folder_is_refused_at_once_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "output.log")
    with pytest.raises((OSError, FileRefused)):
        open_job_file_for_append(tmp_path / "output.log")


def test_a_regular_file_is_appended_to_or_replaced(tmp_path: Path) -> None:
    note_in_log(tmp_path, "one")
    note_in_log(tmp_path, "two", "three")
    assert (tmp_path / "output.log").read_text() == (
        "torchyard: one\ntorchyard: two\ntorchyard: three\n"
    )
    (tmp_path / "config.json").write_text('{"old": "and longer"}')
    replace_job_file(tmp_path / "config.json", b"{}")
    assert (tmp_path / "config.json").read_text() == "{}"
