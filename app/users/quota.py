"""The per-user quota (``TORCHYARD_USER_QUOTA_GB``): what one user keeps stored, and the refusal.

A user's use is the sum of sizes recorded when the bytes were written, never a walk of a
folder: the code snapshots they uploaded (``code_snapshots.size_bytes``, the stored archive:
the unpacked copy is the worker's shared cache, worker/snapshots.py) and their runs' folders
(``runs.disk_bytes``, measured once by the worker when a run ends, until then its checkpoints'
recorded sizes; an MLflow artifact upload adds its bytes as it is stored: app.runs.files.disk). Two
indexed SUMs per check.

Over the quota, nothing more is stored for that user: an upload (code, an MLflow artifact) is
a 413 and a new run (a launch, a resume, a sweep) a 422, each saying "user quota exceeded:
alice uses 10.2 GB of 10 GB". A run already running finishes (its folder counts once it
ends); the user frees space by deleting runs. Other users are not affected. 0: no quota.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from app.auth.models import User
from app.errors import Invalid, TooLarge
from app.settings import get_settings

GB = 10**9


def usage(session: Session, user_id: int) -> int:
    """Bytes stored for the user: their uploaded snapshots and their runs' folders."""
    from app.code.service import stored_bytes_by
    from app.runs.files.disk import disk_by_owner

    runs = disk_by_owner(session, [user_id]).get(user_id, 0)
    return runs + stored_bytes_by(session, user_id)


def _size(n: float) -> str:
    """10.2 GB, 10 GB, 350 MB: decimal units, one decimal at most."""
    for unit, scale in (("GB", GB), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{f'{n / scale:.1f}'.removesuffix('.0')} {unit}"
    return f"{int(n)} bytes"


def over_quota(session: Session, user: User, adding: int = 0) -> str | None:
    """The sentence naming the quota and the use when ``adding`` more bytes would pass it
    (or the user is at it already), else None (no quota: always None)."""
    quota_gb = get_settings().user_quota_gb
    if quota_gb <= 0:
        return None
    used = usage(session, user.id)
    limit = quota_gb * GB
    if used + adding <= limit and used < limit:
        return None
    added = f"; this upload adds {_size(adding)}" if adding else ""
    return (
        f"user quota exceeded: {user.username} uses {_size(used)} of {_size(limit)}"
        f"{added} (TORCHYARD_USER_QUOTA_GB); delete runs to free space"
    )


def refuse_upload(session: Session, user: User, adding: int) -> None:
    """A 413 for an upload that would take the user past the quota."""
    why = over_quota(session, user, adding)
    if why is not None:
        raise TooLarge(why)


def refuse_run(session: Session, user: User, loc: Sequence[str | int]) -> None:
    """A 422 for a new run of a user at or past the quota (its folder would add to it)."""
    why = over_quota(session, user)
    if why is not None:
        raise Invalid.at(loc, why, kind="user_quota")
