"""Disk use of runs, experiments and users, and the safe removal of a run's files.

A run's disk use is ``runs.disk_bytes``, the size of its folder measured once by its worker
when it ends (``folder_bytes``); until then (or for a run from before the column) it is the
sum of its live checkpoints' sizes. Pages and the API add these up in SQL: no folder is walked
to show a page.

A run folder is hostile input: the job may have left a link to /etc, a FIFO, or a directory
it made unreadable. ``folder_bytes`` and ``remove_folder`` never follow a link (lstat, and
``shutil.rmtree``'s descriptor-based walk, which unlinks a link instead of entering it), and
a directory the job closed (mode 000) is opened up again before it is removed. Under the
sandbox's per-run uid the folder is that uid's, 0700: the API then runs as root, which may
remove it; otherwise the job ran as the API's own uid.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.artifacts import store_fs
from app.runs.models import Checkpoint, Run, RunStatus

log = logging.getLogger(__name__)

ACTIVE = (RunStatus.queued, RunStatus.running)


def _disk_select(group: Any, ids: list[int]) -> Any:
    """SELECT group, SUM(disk use) of the runs whose ``group`` column is in ``ids``: a run's
    measured ``disk_bytes``, else its checkpoints' sizes (a join with their sums by run, not a
    subquery inside the aggregate, which not every database takes)."""
    checkpoint_bytes = (
        select(Checkpoint.run_id, func.sum(Checkpoint.size_bytes).label("size"))
        .join(Run, Run.id == Checkpoint.run_id)
        .where(group.in_(ids))
        .group_by(Checkpoint.run_id)
        .subquery()
    )
    size = func.coalesce(Run.disk_bytes, checkpoint_bytes.c.size, 0)
    return (
        select(group, func.sum(size))
        .outerjoin(checkpoint_bytes, checkpoint_bytes.c.run_id == Run.id)
        .where(group.in_(ids))
        .group_by(group)
    )


def _disk_by(group: Any, session: Session, ids: Iterable[int]) -> dict[int, int]:
    wanted = list(ids)
    if not wanted:
        return {}
    return {key: int(size or 0) for key, size in session.execute(_disk_select(group, wanted))}


def disk_by_run(session: Session, run_ids: Iterable[int]) -> dict[int, int]:
    return _disk_by(Run.id, session, run_ids)


def disk_by_experiment(session: Session, experiment_ids: Iterable[int]) -> dict[int, int]:
    return _disk_by(Run.experiment_id, session, experiment_ids)


def disk_by_owner(session: Session, owner_ids: Iterable[int]) -> dict[int, int]:
    return _disk_by(Run.owner_id, session, owner_ids)


def active_readers(session: Session, run_ids: Iterable[int]) -> dict[str, int]:
    """{resume_from: run id} of the queued or running runs that start (or restart) from a
    checkpoint of one of ``run_ids``: such a file may still be read and must stay."""
    prefixes = [f"{run_id}/" for run_id in run_ids]
    if not prefixes:
        return {}
    rows = session.execute(
        select(Run.resume_from, Run.id).where(Run.status.in_(ACTIVE), Run.resume_from.is_not(None))
    )
    return {
        str(path): run_id
        for path, run_id in rows
        if any(str(path).startswith(prefix) for prefix in prefixes)
    }


def record_disk_use(session: Session, *, run_id: int, folder: Path) -> int:
    """Measure the run's folder once, when it has ended (its worker calls this after the final
    drain), and keep the figure on the row; not a status change."""
    size = folder_bytes(folder)
    session.execute(update(Run).where(Run.id == run_id).values(disk_bytes=size))
    return size


def add_disk_use(session: Session, *, run_id: int, size: int) -> None:
    """Bytes written into a run without a job (an MLflow artifact upload): added to its disk
    use as they are stored, so the owner's quota counts them with no folder walked."""
    session.execute(
        update(Run)
        .where(Run.id == run_id)
        .values(disk_bytes=func.coalesce(Run.disk_bytes, 0) + size)
    )


def folder_bytes(folder: Path) -> int:
    """The bytes of every regular file under ``folder``, links not followed (a link counts
    nothing: what it points to is not the run's)."""
    total = 0
    for root, dirs, names in os.walk(folder, followlinks=False, onerror=lambda _exc: None):
        for name in names + dirs:
            try:
                info = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total


def remove_folder(folder: Path) -> int:
    """Remove ``folder`` and all under it without following any link; returns the bytes
    freed. A folder that is itself a link is not the run's: only the link goes."""
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        return 0
    if not stat.S_ISDIR(info.st_mode):
        folder.unlink()
        return 0
    freed = folder_bytes(folder)
    shutil.rmtree(folder, onerror=_open_up_and_retry)
    return freed


def _open_up_and_retry(function: Any, path: str, exc_info: Any) -> None:
    """A directory the job made unreadable or unwritable (chmod 000): give its owner (us,
    or root) access again and retry once; anything else is raised."""
    exc = exc_info[1]
    if isinstance(exc, FileNotFoundError):
        return
    if not isinstance(exc, PermissionError):
        raise exc
    parent = os.path.dirname(path)
    for target in (parent, path):
        try:
            if stat.S_ISDIR(os.lstat(target).st_mode):  # never chmod through a link
                os.chmod(target, 0o700)
        except OSError:
            pass
    if getattr(function, "__name__", "") in ("rmdir", "unlink"):
        function(path)
    elif stat.S_ISDIR(os.lstat(path).st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def remove_from_store(store: str, key: str) -> int:
    """Remove ``key`` (a file or a folder) from the artifact store; returns the bytes freed."""
    fs, _root = store_fs(store)
    if not fs.exists(key):
        return 0
    freed = int(fs.du(key, total=True) or 0)
    fs.rm(key, recursive=True)
    return freed
