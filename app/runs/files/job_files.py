"""The one way torchyard opens a file a job wrote: its log, spool, TensorBoard event files,
error records, environment record, checkpoints, the files it offers for download and the
checkpoint a resumed run's sandbox binds; and, from torchyard.paths, the one test of "is this
path under that root".

A run directory is written by someone's code, so every name in it is hostile: a symbolic
link to the database, a named pipe in place of ``output.log`` (a plain ``open()`` of it
waits for a writer forever, holding whatever lock its caller holds), a directory where a file
belongs. So a path is walked one component at a time from the run directory with
``O_NOFOLLOW`` (no link is followed, at any depth) and ``O_NONBLOCK`` (opening a FIFO or a
device returns at once), each step checked with ``fstat`` on what was actually opened, and
only a regular file is read, from that same descriptor: a link or pipe swapped in between a
check and the open (a race) is refused too. Ownership is not checked: a sandboxed job's files
belong to its own user id; their type is what matters.

Nothing here resolves a path and then opens it by name (``resolve()`` then ``open()``): a job
can swap a link in between. ``within`` is the containment test for paths torchyard built
itself (mount points, a resolved workspace script); a job's file is reached through
``open_in`` instead.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from torchyard.paths import within as within  # the one containment test, for app's modules


class FileRefused(Exception):
    """A path that is not a run's regular file or folder; the message says why."""


_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def components(relative: str) -> list[str]:
    """The names along ``relative``; FileRefused when it would leave its root."""
    if not relative or "\x00" in relative or relative.startswith("/") or "\\" in relative:
        raise FileRefused(f"{relative!r} is not a path inside the run's directory")
    parts = relative.strip("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise FileRefused(f"{relative!r} is not a path inside the run's directory")
    return parts


def open_in(root: Path, relative: str) -> tuple[int, os.stat_result]:
    """An open descriptor of ``root/relative`` and its fstat, reached without following any
    link; a regular file or a directory, else FileRefused. Missing, a link or unreadable:
    FileNotFoundError. The caller closes it."""
    parts = components(relative)
    try:
        fd = os.open(root, _FLAGS | os.O_DIRECTORY)
    except OSError as exc:
        raise FileNotFoundError(relative) from exc
    try:
        for part in parts:
            try:
                child = os.open(part, _FLAGS, dir_fd=fd)
            except OSError as exc:  # missing, a link (ELOOP), no permission
                if exc.errno == errno.ENXIO:  # a socket
                    raise FileRefused(f"{relative!r} is not a regular file") from None
                raise FileNotFoundError(relative) from exc
            os.close(fd)
            fd = child
            info = os.fstat(fd)
            if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
                raise FileRefused(f"{relative!r} is not a regular file")
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode):
            # Reads of a regular file never block; blocking mode again for plain reads.
            os.set_blocking(fd, True)
        return fd, info
    except BaseException:
        os.close(fd)
        raise


def folder_entries(root: Path, relative: str = "") -> list[tuple[str, os.stat_result]]:
    """The names in the folder ``root/relative`` (``root`` itself for ""), each with its own
    lstat, read through a descriptor reached without a link: a folder the job swapped for a
    link after a listing saw it is not entered. FileRefused when it is not a folder."""
    if relative.strip("/"):
        fd, info = open_in(root, relative)
    else:
        fd = os.open(root, _FLAGS | os.O_DIRECTORY)
        info = os.fstat(fd)
    try:
        if not stat.S_ISDIR(info.st_mode):
            raise FileRefused(f"{relative!r} is not a folder")
        found: list[tuple[str, os.stat_result]] = []
        with os.scandir(fd) as entries:  # reads a duplicate of fd
            for entry in entries:
                try:
                    found.append((entry.name, entry.stat(follow_symlinks=False)))
                except OSError:  # gone since
                    continue
        return found
    finally:
        os.close(fd)


def clean_relative(relative: str) -> str:
    """``relative`` as one canonical path inside its root (``a/b``); FileRefused when it
    would leave it (absolute, ``..``, empty, a NUL)."""
    return "/".join(components(relative))


def regular_fd(root: Path, relative: str) -> int:
    """A read-only descriptor of the regular file ``root/relative``, reached without a link
    (``open_in``); FileRefused for anything else there, FileNotFoundError when nothing (or a
    link) is. The caller closes it, or hands it on (bwrap's ``--ro-bind-fd``)."""
    fd, info = open_in(root, relative)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise FileRefused(f"{relative!r} is not a regular file")
    return fd


def open_regular(root: Path, relative: str) -> BinaryIO:
    """``root/relative`` opened for reading when it is a regular file reached without a
    link; FileRefused for anything else there (a FIFO, a device, a directory),
    FileNotFoundError when nothing (or a link) is there. Never blocks."""
    return os.fdopen(regular_fd(root, relative), "rb")


def is_regular(root: Path, relative: str) -> bool:
    """Whether ``root/relative`` is, right now, a regular file reached without a link. A
    hint for a decision (is it on this disk?); whoever reads it opens it again here."""
    try:
        os.close(regular_fd(root, relative))
    except (FileRefused, OSError):
        return False
    return True


def open_job_file(path: Path) -> BinaryIO:
    """``open_regular`` of a file directly in its directory (``run_dir / "output.log"``)."""
    return open_regular(path.parent, path.name)


def read_job_file(path: Path, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of a job's small file (a record it wrote), None when it is not a
    regular file (missing, a link, a FIFO) or larger than ``limit``."""
    try:
        with open_job_file(path) as f:
            if os.fstat(f.fileno()).st_size > limit:
                return None
            return f.read(limit)
    except (FileNotFoundError, FileRefused, OSError):
        return None


def open_job_file_for_append(path: Path) -> BinaryIO:
    """A run-folder file opened for appending, created if missing (the job's output, the
    worker's notes): never through a link, and never a FIFO or a device. The folder is the
    job's (its own uid when the worker is root, worker/sandbox.py): it may have left a link to
    any file there, which a root worker would write through, or a FIFO, whose open would wait
    for a reader. OSError (ELOOP, ENXIO, FileRefused) when it is not a regular file."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    dir_fd = os.open(path.parent, _FLAGS | os.O_DIRECTORY)
    try:
        fd = os.open(path.name, flags, 0o600, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileRefused(f"{path} is not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "ab", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def append_to_job_file(path: Path, data: bytes) -> bool:
    """Append ``data`` to a regular file the job can also write (its log); False, without
    blocking, when it is anything else: opening a FIFO for writing would wait for a reader."""
    try:
        with open_job_file_for_append(path) as out:
            out.write(data)
        return True
    except (OSError, FileRefused):
        return False


def job_file_size(path: Path) -> int | None:
    """The size of a regular file (not followed if a link), None for anything else."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def cut_job_file(path: Path, size: int, tail: bytes = b"") -> bool:
    """Cut a regular file (the job's log) to ``size`` bytes and write ``tail`` there; False,
    without blocking, when it is not a regular file. Not opened for appending, so ``tail``
    lands at ``size`` even while the job appends: bytes the job adds meanwhile land after
    it, and the next cut removes them."""
    try:
        dir_fd = os.open(path.parent, _FLAGS | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        fd = os.open(
            path.name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except OSError:
        return False
    finally:
        os.close(dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        os.ftruncate(fd, size)
        if tail:
            os.pwrite(fd, tail, size)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def replace_job_file(path: Path, data: bytes) -> None:
    """Write ``path`` whole through a new file renamed over it: whatever the job left at that
    name (a link to the database, a FIFO) is replaced, never written through or waited on."""
    tmp = path.with_name(f".{path.name}.{os.urandom(6).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def remove_job_file(root: Path, relative: str) -> int:
    """Unlink ``root/relative`` (a file the job wrote, e.g. a checkpoint retention dropped),
    its folder reached without following any link and the name itself unlinked, never what
    it may point to; returns the bytes freed (0 when it is gone, a link or not a regular
    file; a directory is left alone)."""
    parts = components(relative)
    if len(parts) > 1:
        fd, info = open_in(root, "/".join(parts[:-1]))
        if not stat.S_ISDIR(info.st_mode):
            os.close(fd)
            return 0
    else:
        fd = os.open(root, _FLAGS | os.O_DIRECTORY)
    try:
        try:
            leaf = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return 0
        if stat.S_ISDIR(leaf.st_mode):
            return 0
        os.unlink(parts[-1], dir_fd=fd)  # a link itself goes, never what it points to
        return leaf.st_size if stat.S_ISREG(leaf.st_mode) else 0
    finally:
        os.close(fd)


@contextlib.contextmanager
def job_socket(path: Path) -> Iterator[str]:
    """A unix socket a job made (a session's JupyterLab, app/sessions), as an address that
    reaches that very socket: ``/proc/self/fd/N`` of an ``O_PATH`` descriptor taken without
    following any link. The folder is the job's: a link named like the socket, to the host's
    Docker or database socket, would have torchyard (root) connect to that with the
    browser's request; a link is refused here, and so is anything but a socket, and a swap
    after the check changes nothing (the address names the descriptor, not the name). Open
    while the caller connects; FileNotFoundError when no socket (or a link) is there."""
    folder, info = open_in(path.parent.parent, path.parent.name)
    try:
        if not stat.S_ISDIR(info.st_mode):
            raise FileNotFoundError(str(path))
        try:
            fd = os.open(path.name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
        except OSError as exc:
            raise FileNotFoundError(str(path)) from exc
    finally:
        os.close(folder)
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise FileNotFoundError(f"{path} is not a socket")
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)
