"""Ceilings on what a run may ask of its host: memory, CPUs, disk, processes (issue 37).

A member chose their own limits: ``memory_gb: 65536`` made a 64 TiB memory cgroup and a RAM
tmpfs as large, ``cpus: 4`` on a 2-core box took every core. Now each field has a ceiling:

- the box's default (`box_defaults`): the host's RAM less a reserve (a tenth, at least 1 GiB),
  its cores, ``ceiling_disk_share`` of the data dir's free space, 4096 processes; with a user
  quota (app/users/quota.py) the disk ceiling is that quota at most;
- an admin's per role and per user (the ``resource_ceilings`` table, written here only): a
  user's field wins over the role's, the role's over the box's; null falls back.

`hold` applies them to a run's config when the run is created (a launch, a resume, a sweep's
trial): a limit the request asked above its ceiling is a 422 naming the field and the ceiling;
one it did not ask (a default, the experiment's, a parent run's) is held to the ceiling
instead, so that a small box's members launch with the defaults and a resume never fails on a
ceiling that moved (the disk's follows the free space). The stored config then holds the
limits the run runs with (worker/limits.py applies exactly those). Functions flush; the caller
commits.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.models import Role, User
from app.errors import Invalid, field_error
from app.settings import get_settings
from app.timeutil import utcnow
from app.users.models import ResourceCeiling
from app.users.quota import GB

GIB = 1024**3
BOX_MAX_PROCESSES = 4096
Field = Literal["memory_gb", "cpus", "disk_gb", "max_processes"]
FIELDS: tuple[Field, ...] = ("memory_gb", "cpus", "disk_gb", "max_processes")
UNITS = {"memory_gb": "GiB", "cpus": "CPUs", "disk_gb": "GB", "max_processes": "processes"}
Source = Literal["user", "role", "box"]


@dataclass(frozen=True)
class Ceilings:
    """A value per field; in a row's or a request's form, None means "not set here"."""

    memory_gb: float | None = None
    cpus: float | None = None
    disk_gb: float | None = None
    max_processes: int | None = None

    def get(self, name: Field) -> float | None:
        value: float | None = getattr(self, name)
        return value

    def as_dict(self) -> dict[str, float | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class Effective:
    """A user's ceilings in force, and where each comes from."""

    values: Ceilings
    sources: dict[str, Source]


def _round_down(value: float) -> float:
    return int(value * 10) / 10


def box_defaults() -> Ceilings:
    """This host's defaults (the API's host: on a team deployment, an admin sets ceilings
    that fit the GPU hosts)."""
    settings = get_settings()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    reserve = max(GIB, memory // 10)
    folder = settings.resolved_data_dir
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    disk_gb = shutil.disk_usage(folder).free * settings.ceiling_disk_share / GB
    if settings.user_quota_gb > 0:
        disk_gb = min(disk_gb, settings.user_quota_gb)
    return Ceilings(
        memory_gb=max(_round_down((memory - reserve) / GIB), 0.1),
        cpus=float(len(os.sched_getaffinity(0))),
        disk_gb=max(_round_down(disk_gb), 0.1),
        max_processes=BOX_MAX_PROCESSES,
    )


def _row(session: Session, *, role: str | None = None, user_id: int | None = None) -> Ceilings:
    if role is not None:
        row = session.scalar(select(ResourceCeiling).where(ResourceCeiling.role == role))
    else:
        row = session.scalar(select(ResourceCeiling).where(ResourceCeiling.user_id == user_id))
    if row is None:
        return Ceilings()
    return Ceilings(row.memory_gb, row.cpus, row.disk_gb, row.max_processes)


def effective(session: Session, user: User) -> Effective:
    """The user's ceilings, field by field: theirs, else their role's, else the box's."""
    layers: list[tuple[Source, Ceilings]] = [
        ("user", _row(session, user_id=user.id)),
        ("role", _row(session, role=user.role)),
        ("box", box_defaults()),
    ]
    values: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    for name in FIELDS:
        source, value = next((s, c.get(name)) for s, c in layers if c.get(name) is not None)
        values[name], sources[name] = value, source
    return Effective(Ceilings(**values), sources)


def set_ceilings(
    session: Session, ceilings: Ceilings, *, role: Role | None = None, user: User | None = None
) -> Ceilings:
    """Replaces a role's or a user's ceilings (None fields: fall back). All None: the row
    goes."""
    if role is not None:
        where = ResourceCeiling.role == str(role)
    elif user is not None:
        where = ResourceCeiling.user_id == user.id
    else:
        raise ValueError("set ceilings for a role or a user")
    row = session.scalar(select(ResourceCeiling).where(where))
    if all(v is None for v in ceilings.as_dict().values()):
        if row is not None:
            session.delete(row)
            session.flush()
        return ceilings
    if row is None:
        row = ResourceCeiling(
            role=str(role) if role is not None else None,
            user_id=user.id if user is not None and role is None else None,
        )
        session.add(row)
    row.memory_gb, row.cpus = ceilings.memory_gb, ceilings.cpus
    row.disk_gb, row.max_processes = ceilings.disk_gb, ceilings.max_processes
    row.updated_at = utcnow()
    session.flush()
    return ceilings


def listed(session: Session) -> tuple[dict[str, Ceilings], dict[int, Ceilings]]:
    """Every role's and user's ceilings that are set (by role, by user id)."""
    roles: dict[str, Ceilings] = {}
    users: dict[int, Ceilings] = {}
    for row in session.scalars(select(ResourceCeiling).order_by(ResourceCeiling.id)):
        value = Ceilings(row.memory_gb, row.cpus, row.disk_gb, row.max_processes)
        if row.role is not None:
            roles[row.role] = value
        elif row.user_id is not None:
            users[row.user_id] = value
    return roles, users


def _number(value: float) -> str:
    return f"{value:g}"


def hold(
    session: Session,
    owner: User,
    config: dict[str, Any],
    loc: tuple[str | int, ...],
    asked: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """`config` (validated, defaults filled) with its limits held to `owner`'s ceilings. A
    limit this request asked (`asked`: its own ``resources``, an experiment's body or a run's
    overrides) above its ceiling is an Invalid naming the field and the ceiling; any other
    above one (a default, the experiment's, a parent run's, a ceiling lowered since, a disk
    ceiling that shrank with the free space) is lowered to it."""
    resources = dict(config.get("resources") or {})
    found = effective(session, owner)
    asked = asked if isinstance(asked, Mapping) else {}
    errors = []
    for name in FIELDS:
        value, ceiling = resources.get(name), found.values.get(name)
        if value is None or ceiling is None or value <= ceiling:
            continue
        if name not in asked:
            resources[name] = int(ceiling) if name == "max_processes" else ceiling
            continue
        source = {"user": owner.username, "role": f"role {owner.role}", "box": "this box"}
        errors.append(
            field_error(
                [*loc, "resources", name],
                f"{_number(value)} is above the ceiling of {_number(ceiling)} {UNITS[name]} "
                f"for {source[found.sources[name]]} (an admin sets ceilings per role or user)",
                value,
                kind="less_than_equal",
            )
        )
    if errors:
        raise Invalid(errors)
    return {**config, "resources": resources}
