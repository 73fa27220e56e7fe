"""Code snapshots unpacked once per digest on a host, shared read-only by the runs that use them.

A snapshot that unpacks to 1,000 MiB used to be extracted again into every run's folder: three
runs, three GiB. Here it is unpacked once into ``<data_dir>/snapshots/<hex>/`` (every member
checked again, app.code.tarcheck: the worker trusts neither the upload path nor the store),
made read-only (directories 0555, files 0444 or 0555), and each run gets a mirror of it in its
own folder (worker/code.py) whose files are links into this copy. The sandbox binds the copy
read-only at its own path (worker/sandbox.py: ``SandboxSpec.shared_read_only``), so a job can
read its code but change nothing of another run's.

Like the runs' environments (worker/environments.py), the pattern is file locks:

- unpacked once per host: an exclusive lock per digest while unpacking, into a temp folder
  renamed into place, then a marker beside it (``<hex>.json``: its size), so a crashed unpack
  leaves nothing that looks ready;
- each run holds a shared lock on its snapshot while its job runs; eviction (least recently
  used first, down to ``snapshot_cache_max_bytes``) takes an exclusive one without waiting, so
  it never removes one in use. It runs after each unpack and when a run lets its snapshot go:
  a snapshot no run uses is removed as soon as the total is over the cap (0: at once).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from app.code.store import local_archive
from app.code.tarcheck import Limits, extract
from app.settings import get_settings
from worker.file_lock import flock

log = logging.getLogger(__name__)

LOCKS = ".locks"
MARKER_SUFFIX = ".json"


def _hex(digest: str) -> str:
    """The folder name of a digest ("sha256:<hex>", checked by the config: hex only)."""
    name = digest.removeprefix("sha256:")
    if not name or not all(c in "0123456789abcdef" for c in name):
        raise ValueError(f"not a snapshot digest: {digest!r}")
    return name


def _read_only(root: Path) -> int:
    """Every folder 0555, every file 0444 (0555 when executable): readable by a run's own uid,
    writable by none (the worker's umask is 077). Returns the bytes on disk."""
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            total += info.st_blocks * 512
            if stat.S_ISREG(info.st_mode):
                os.chmod(path, 0o555 if info.st_mode & stat.S_IXUSR else 0o444)
        os.chmod(folder, 0o555)
    return total


def remove_tree(path: Path) -> None:
    """Remove a read-only tree: its folders opened up first (a worker that is not root could
    not unlink an entry of a 0555 folder)."""
    for folder, _dirs, _files in os.walk(path):
        with contextlib.suppress(OSError):
            os.chmod(folder, 0o700)
    shutil.rmtree(path, ignore_errors=True)


class Snapshots:
    """The unpacked snapshots of one host, under ``root``."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes

    def _lock(self, name: str, kind: str) -> Path:
        return self.root / LOCKS / f"{name}.{kind}"

    def _marker(self, name: str) -> Path:
        return self.root / f"{name}{MARKER_SUFFIX}"

    def path(self, digest: str) -> Path:
        return self.root / _hex(digest)

    @contextlib.contextmanager
    def use(self, digest: str) -> Iterator[Path]:
        """The snapshot's read-only unpacked copy, unpacked unless it is there, kept from
        eviction until the block ends (the job's whole life). Raises SnapshotMissing or
        TarRefused (nothing is left of a refused archive)."""
        name = _hex(digest)
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        (self.root / LOCKS).mkdir(mode=0o700, exist_ok=True)
        final = self.root / name
        try:
            # Shared before looking: an eviction either ended before (the folder is gone) or
            # waits for this run to end.
            with flock(self._lock(name, "use"), fcntl.LOCK_SH):
                with flock(self._lock(name, "unpack"), fcntl.LOCK_EX):
                    if self._marker(name).is_file() and final.is_dir():
                        os.utime(self._marker(name))  # the least recently used go first
                    else:
                        self._unpack(digest, name, final)
                self.evict(keep=name)
                yield final
        finally:
            self.evict(keep=None)

    def _unpack(self, digest: str, name: str, final: Path) -> None:
        for stale in self.root.glob(f".unpack-{name}-*"):  # a crashed unpack's (we hold its lock)
            remove_tree(stale)
        if final.exists():  # no marker: not a finished unpack
            remove_tree(final)
        staging = self.root / f".unpack-{name}-{secrets.token_hex(4)}"
        try:
            with local_archive(digest) as archive:
                extract(archive, staging, Limits.from_settings())
            size = _read_only(staging)
            os.rename(staging, final)
        except BaseException:
            remove_tree(staging)
            raise
        marker = self._marker(name)
        tmp = marker.with_name(f".{marker.name}-{secrets.token_hex(4)}")
        tmp.write_text(json.dumps({"digest": digest, "size_bytes": size}))
        os.replace(tmp, marker)
        log.info("code snapshot %s unpacked (%d bytes) into %s", digest, size, final)

    def evict(self, *, keep: str | None) -> list[str]:
        """Least recently used first, until the total is under the cap; a snapshot a run
        holds (its use lock) is skipped. Returns the names removed."""
        ready: list[tuple[float, int, str]] = []
        for marker in self.root.glob(f"*{MARKER_SUFFIX}"):
            try:
                size = int(json.loads(marker.read_text())["size_bytes"])
                ready.append((marker.stat().st_mtime, size, marker.name[: -len(MARKER_SUFFIX)]))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        total = sum(size for _, size, _ in ready)
        removed: list[str] = []
        for _, size, name in sorted(ready):
            if total <= self.max_bytes:
                break
            if name == keep:
                continue
            with flock(self._lock(name, "use"), fcntl.LOCK_EX | fcntl.LOCK_NB) as free:
                if not free:
                    continue
                self._marker(name).unlink(missing_ok=True)
                trash = self.root / f".evicted-{name}-{secrets.token_hex(4)}"
                try:
                    os.rename(self.root / name, trash)
                except OSError:
                    continue
            remove_tree(trash)
            log.info("code snapshot %s removed (%d bytes; cap %d)", name, size, self.max_bytes)
            total -= size
            removed.append(name)
        return removed


def cache() -> Snapshots:
    """This host's snapshots, as the settings say."""
    settings = get_settings()
    return Snapshots(settings.snapshots_dir, settings.snapshot_cache_max_bytes)
