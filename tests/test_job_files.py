"""app.runs.files.job_files: a file a job wrote is read only when it is a regular file reached
without a link, and nothing it can put in a run directory (a FIFO, a link, a directory, a
socket) blocks the reader: each is refused at once."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app.runs.files.job_files import (
    FileRefused,
    append_to_job_file,
    clean_relative,
    cut_job_file,
    folder_entries,
    is_regular,
    job_file_size,
    job_socket,
    open_regular,
    read_job_file,
    regular_fd,
    within,
)


def quick(call: Callable[[], object]) -> object:
    """``call()`` and assert it came back at once (a FIFO open without O_NONBLOCK would hang
    forever: the test would time out instead of failing)."""
    began = time.monotonic()
    try:
        return call()
    finally:
        assert time.monotonic() - began < 1.0


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    (tmp_path / "secret.db").write_bytes(b"password hashes")
    run = tmp_path / "run"
    run.mkdir()
    (run / "output.log").write_bytes(b"hello\n")
    os.mkfifo(run / "fifo")
    (run / "link").symlink_to(tmp_path / "secret.db")
    (run / "dirlink").symlink_to(tmp_path)
    (run / "folder").mkdir()
    (run / "folder" / "inner.txt").write_bytes(b"inner")
    return run


def test_a_regular_file_is_read_from_the_descriptor_that_was_checked(run_dir: Path) -> None:
    with open_regular(run_dir, "output.log") as f:
        assert f.read() == b"hello\n"
    with open_regular(run_dir, "folder/inner.txt") as f:
        assert f.read() == b"inner"
    assert read_job_file(run_dir / "output.log", 100) == b"hello\n"
    assert read_job_file(run_dir / "output.log", 3) is None  # larger than asked for


def test_a_fifo_is_refused_without_blocking(run_dir: Path) -> None:
    with pytest.raises(FileRefused):
        quick(lambda: open_regular(run_dir, "fifo"))
    assert quick(lambda: read_job_file(run_dir / "fifo", 100)) is None
    assert quick(lambda: job_file_size(run_dir / "fifo")) is None
    # Writing: opening a FIFO for writing would wait for a reader.
    assert quick(lambda: append_to_job_file(run_dir / "fifo", b"x")) is False
    assert quick(lambda: cut_job_file(run_dir / "fifo", 0)) is False


def test_a_fifo_with_a_writer_holding_it_open_is_refused_too(run_dir: Path) -> None:
    reader = os.open(run_dir / "fifo", os.O_RDONLY | os.O_NONBLOCK)
    writer = os.open(run_dir / "fifo", os.O_WRONLY)
    try:
        with pytest.raises(FileRefused):
            quick(lambda: open_regular(run_dir, "fifo"))
        assert quick(lambda: append_to_job_file(run_dir / "fifo", b"x")) is False
    finally:
        os.close(writer)
        os.close(reader)


def test_a_symlink_is_never_followed(run_dir: Path) -> None:
    with pytest.raises(FileNotFoundError):
        open_regular(run_dir, "link")
    with pytest.raises(FileNotFoundError):
        open_regular(run_dir, "dirlink/secret.db")  # a link in the middle of the path
    assert read_job_file(run_dir / "link", 100) is None
    assert job_file_size(run_dir / "link") is None
    assert append_to_job_file(run_dir / "link", b"pwned") is False
    assert cut_job_file(run_dir / "link", 0) is False
    assert (run_dir.parent / "secret.db").read_bytes() == b"password hashes"


def test_a_directory_or_a_socket_is_refused(run_dir: Path) -> None:
    with pytest.raises(FileRefused):
        quick(lambda: open_regular(run_dir, "folder"))
    assert read_job_file(run_dir / "folder", 100) is None
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(run_dir / "sock"))
        with pytest.raises((FileRefused, FileNotFoundError)):
            quick(lambda: open_regular(run_dir, "sock"))
    finally:
        sock.close()


@pytest.mark.parametrize("path", ["../secret.db", "/etc/passwd", "a/../../x", "", "a\x00b"])
def test_a_path_that_leaves_the_run_directory_is_refused(run_dir: Path, path: str) -> None:
    with pytest.raises(FileRefused):
        open_regular(run_dir, path)


def test_appending_and_cutting_a_regular_file(run_dir: Path) -> None:
    log = run_dir / "output.log"
    assert append_to_job_file(log, b"world\n")
    assert cut_job_file(log, 3, b"!\n")
    assert log.read_bytes() == b"hel!\n"
    assert append_to_job_file(run_dir / "new.log", b"created\n")
    assert (run_dir / "new.log").read_bytes() == b"created\n"


def test_a_file_written_whole_replaces_a_link_or_fifo_without_following_it(
    run_dir: Path,
) -> None:
    from app.runs.files.job_files import replace_job_file

    quick(lambda: replace_job_file(run_dir / "link", b"{}"))
    quick(lambda: replace_job_file(run_dir / "fifo", b"[]"))
    assert (run_dir / "link").read_bytes() == b"{}" and not (run_dir / "link").is_symlink()
    assert (run_dir / "fifo").read_bytes() == b"[]"
    assert (run_dir.parent / "secret.db").read_bytes() == b"password hashes"


def test_a_link_swapped_in_after_the_check_is_refused_at_the_open(run_dir: Path) -> None:
    """``is_regular`` is a hint: the open that reads decides again, on what it opened."""
    assert is_regular(run_dir, "output.log")
    (run_dir / "output.log").unlink()
    (run_dir / "output.log").symlink_to(run_dir.parent / "secret.db")
    assert not is_regular(run_dir, "output.log")
    with pytest.raises(FileNotFoundError):
        open_regular(run_dir, "output.log")


def test_what_was_opened_is_read_even_when_the_name_is_swapped_afterwards(run_dir: Path) -> None:
    fd = regular_fd(run_dir, "folder/inner.txt")
    try:
        (run_dir / "folder").rename(run_dir / "moved")
        (run_dir / "folder").symlink_to(run_dir.parent)  # the path now leads out
        assert os.read(fd, 100) == b"inner"  # the descriptor is still the checked file
    finally:
        os.close(fd)
    with pytest.raises(FileNotFoundError):
        regular_fd(run_dir, "folder/secret.db")


def test_a_folder_swapped_for_a_link_after_its_listing_is_not_entered(run_dir: Path) -> None:
    names = {name for name, _info in folder_entries(run_dir)}
    assert {"output.log", "fifo", "link", "dirlink", "folder"} <= names
    assert [name for name, _ in folder_entries(run_dir, "folder")] == ["inner.txt"]
    (run_dir / "folder" / "inner.txt").unlink()
    (run_dir / "folder").rmdir()
    (run_dir / "folder").symlink_to(run_dir.parent)
    with pytest.raises(FileNotFoundError):
        folder_entries(run_dir, "folder")
    with pytest.raises(FileNotFoundError):
        folder_entries(run_dir, "dirlink")
    with pytest.raises(FileRefused):
        folder_entries(run_dir, "output.log")


@pytest.mark.parametrize("path", ["../secret.db", "/etc/passwd", "a/../../x", "./x", "", "a\x00b"])
def test_every_opener_refuses_a_path_out_of_its_root(run_dir: Path, path: str) -> None:
    with pytest.raises(FileRefused):
        clean_relative(path)
    with pytest.raises(FileRefused):
        regular_fd(run_dir, path)
    with pytest.raises(FileRefused):
        folder_entries(run_dir, path or "..")
    assert not is_regular(run_dir, path)


def test_within_compares_components_not_text(tmp_path: Path) -> None:
    assert within(tmp_path / "a" / "b", tmp_path / "a")
    assert within(tmp_path / "a", tmp_path / "a")
    assert not within(tmp_path / "ab", tmp_path / "a")  # "startswith" would say yes
    assert not within(tmp_path, tmp_path / "a")
    assert clean_relative("checkpoints/last.pt/") == "checkpoints/last.pt"


def test_job_socket_reaches_the_jobs_own_socket_and_never_a_link(tmp_path: Path) -> None:
    """A session's folder is its job's: a link named lab.sock to another socket of the host
    (Docker's, a database's) must not be what torchyard connects to as root."""
    folder = tmp_path / ".session"
    folder.mkdir()
    host_socket = tmp_path / "host.sock"  # stands for /var/run/docker.sock
    with contextlib.ExitStack() as stack:
        host = stack.enter_context(socket.socket(socket.AF_UNIX))
        host.bind(str(host_socket))
        host.listen(1)
        (folder / "lab.sock").symlink_to(host_socket)
        with pytest.raises(FileNotFoundError), job_socket(folder / "lab.sock"):
            pass
        (folder / "lab.sock").unlink()
        os.mkfifo(folder / "lab.sock")
        with pytest.raises(FileNotFoundError), job_socket(folder / "lab.sock"):
            pass
        (folder / "lab.sock").unlink()
        own = stack.enter_context(socket.socket(socket.AF_UNIX))
        own.bind(str(folder / "lab.sock"))
        own.listen(1)
        with job_socket(folder / "lab.sock") as address:
            # Swapped for a link after the check: the address still names the job's socket.
            (folder / "lab.sock").unlink()
            (folder / "lab.sock").symlink_to(host_socket)
            client = stack.enter_context(socket.socket(socket.AF_UNIX))
            client.connect(address)
        own.settimeout(5)
        accepted, _ = own.accept()
        accepted.close()
    (folder / "lab.sock").unlink()
    replaced = tmp_path / "elsewhere"
    replaced.mkdir()
    folder.rmdir()
    folder.symlink_to(replaced)  # the folder itself a link: refused as well
    with pytest.raises(FileNotFoundError), job_socket(folder / "lab.sock"):
        pass
