"""Where snapshot archives live: ``<data_dir>/code/<hex>.tar.gz``, or with an artifact store
(team mode: the API and the workers share no disk) ``<store>/code/<hex>.tar.gz``.

Content-addressed: the name is the SHA-256 of the bytes, so a snapshot is stored once however
many runs use it, and a worker that fetches one from the store checks the bytes against the
name before it extracts anything (it trusts the store no more than the upload).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.artifacts import StoredFile, renames_atomically, store_fs
from app.settings import get_settings

DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
_DIGEST = re.compile(DIGEST_PATTERN)
HASH_BLOCK = 1024 * 1024


class SnapshotMissing(RuntimeError):
    """The archive is neither on this host nor in the artifact store (or its bytes do not
    match its digest)."""


def is_digest(value: str) -> bool:
    return bool(_DIGEST.match(value))


def _hex(digest: str) -> str:
    if not is_digest(digest):
        raise ValueError(f"not a snapshot digest: {digest!r}")
    return digest.removeprefix("sha256:")


def code_dir() -> Path:
    """The local folder of archives (and of uploads in progress, under ``tmp/``)."""
    return get_settings().resolved_data_dir / "code"


def temp_dir() -> Path:
    path = code_dir() / "tmp"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def local_path(digest: str) -> Path:
    return code_dir() / f"{_hex(digest)}.tar.gz"


def store_key(root: str, digest: str) -> str:
    return f"{root}/code/{_hex(digest)}.tar.gz"


def file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(HASH_BLOCK):
            sha.update(block)
    return f"sha256:{sha.hexdigest()}"


def exists(digest: str) -> bool:
    store = get_settings().artifact_store
    if not store:
        return local_path(digest).is_file()
    fs, root = store_fs(store)
    return bool(fs.exists(store_key(root, digest)))


def put(tmp: Path, digest: str) -> None:
    """Move the checked archive at ``tmp`` into place (it is consumed)."""
    store = get_settings().artifact_store
    if not store:
        target = local_path(digest)
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.replace(tmp, target)
        return
    fs, root = store_fs(store)
    key = store_key(root, digest)
    try:
        if not renames_atomically(fs):
            fs.put_file(str(tmp), key)
            return
        parent = key.rsplit("/", 1)[0]
        fs.makedirs(parent, exist_ok=True)
        part = f"{parent}/.{secrets.token_hex(4)}.part"
        try:
            fs.put_file(str(tmp), part)
            fs.mv(part, key)
        except BaseException:
            if fs.exists(part):
                fs.rm_file(part)
            raise
    finally:
        tmp.unlink(missing_ok=True)


def open_archive(digest: str) -> StoredFile | None:
    """The archive for streaming (a download), or None when it is not stored."""
    local = local_path(digest)
    if local.is_file():
        return StoredFile(local.stat().st_size, _file_chunks(local))
    store = get_settings().artifact_store
    if not store:
        return None
    fs, root = store_fs(store)
    key = store_key(root, digest)
    try:
        size = fs.size(key)
    except FileNotFoundError:
        return None
    return StoredFile(int(size) if size is not None else None, _store_chunks(store, key))


def _file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while block := f.read(HASH_BLOCK):
            yield block


def _store_chunks(store: str, key: str) -> Iterator[bytes]:
    fs, _root = store_fs(store)
    with fs.open(key, "rb") as f:
        while block := f.read(HASH_BLOCK):
            yield block


def remove(digest: str) -> int:
    """Remove the archive (local copy and stored one); returns the bytes freed."""
    freed = 0
    local = local_path(digest)
    if local.is_file():
        freed += local.stat().st_size
        local.unlink(missing_ok=True)
    store = get_settings().artifact_store
    if store:
        fs, root = store_fs(store)
        key = store_key(root, digest)
        if fs.exists(key):
            freed += int(fs.size(key) or 0)
            fs.rm_file(key)
    return freed


@contextmanager
def local_archive(digest: str) -> Iterator[Path]:
    """The archive on this host's disk, for a worker to extract: the stored file itself when
    the data dir is shared, else a temp copy fetched from the artifact store, used only when
    its bytes hash to ``digest`` and removed afterwards (workers keep no cache to evict)."""
    local = local_path(digest)
    if local.is_file():
        yield local
        return
    store = get_settings().artifact_store
    if not store:
        raise SnapshotMissing(f"code snapshot {digest} is not stored on this host")
    fs, root = store_fs(store)
    key = store_key(root, digest)
    tmp = temp_dir() / f"fetch-{secrets.token_hex(8)}.tar.gz"
    try:
        try:
            with fs.open(key, "rb") as source, tmp.open("wb") as out:
                shutil.copyfileobj(source, out, HASH_BLOCK)
        except FileNotFoundError:
            raise SnapshotMissing(f"code snapshot {digest} is not in the artifact store") from None
        got = file_digest(tmp)
        if got != digest:
            raise SnapshotMissing(
                f"the artifact store's copy of code snapshot {digest} has other bytes ({got})"
            )
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)
