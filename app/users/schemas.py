from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from app.auth.models import Role, User
from app.timeutil import UtcDateTime


class UserOut(BaseModel):
    id: int
    username: str
    role: Role
    is_admin: bool  # role == admin; kept for clients written before roles
    disabled: bool
    created_at: UtcDateTime
    # Bytes the user's runs hold on disk (app/runs/files/disk.py).
    disk_bytes: int = 0
    # A generated password not changed yet: every API call but the change is refused.
    must_change_password: bool = False

    @classmethod
    def of(cls, user: User, *, disk_bytes: int = 0) -> UserOut:
        return cls(
            id=user.id,
            username=user.username,
            role=Role(user.role),
            is_admin=user.is_admin,
            disabled=not user.is_active,
            created_at=user.created_at,
            disk_bytes=disk_bytes,
            must_change_password=user.must_change_password,
        )


class UserCreated(UserOut):
    """The new user; `password` is the generated one when none was sent (shown this once,
    to be changed at the first login), else null."""

    password: str | None = None


class UserCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The name and password rules are checked in app.users.service (one message for API,
    # pages and CLI); the bounds here only keep absurd bodies out.
    username: str = Field(max_length=200, examples=["ada"])
    # None: one is generated, answered once, and must be changed at the first login.
    password: str | None = Field(None, max_length=1000)
    role: Role = Role.member


class UserUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Role | None = None
    disabled: bool | None = None
    password: str | None = Field(None, max_length=1000)


class PasswordChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    current_password: str = Field(max_length=1000)
    new_password: str = Field(max_length=1000)


class CeilingsIn(BaseModel):
    """A role's or a user's ceilings on a run's limits; null (or absent): falls back to the
    role's, then the box's (app/users/ceilings.py). The bounds are the config's own."""

    model_config = ConfigDict(extra="forbid")

    memory_gb: float | None = Field(None, gt=0, le=65536, description="GiB of a job's memory")
    cpus: float | None = Field(None, gt=0, le=4096, description="CPUs (a quota) of a job")
    disk_gb: float | None = Field(None, gt=0, le=1_000_000, description="GB: folder and /tmp")
    max_processes: int | None = Field(None, ge=16, le=4_194_304, description="at once")


class EffectiveCeilings(BaseModel):
    """A user's ceilings in force, and where each comes from: `user`, `role` or `box`."""

    ceilings: CeilingsIn
    sources: dict[str, str]


class CeilingsTable(BaseModel):
    """Every ceiling an admin set, and the box's defaults beneath them."""

    box: CeilingsIn
    roles: dict[str, CeilingsIn]
    users: dict[str, CeilingsIn]  # by username
