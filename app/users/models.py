"""The ceilings an admin sets on what a run may ask for (app/users/ceilings.py writes them)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import CheckConstraint, DateTime, Float, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.orm_base import Base
from app.timeutil import utcnow


class ResourceCeiling(Base):
    """One role's or one user's ceilings; a null field falls back (user -> role -> the box's
    default, app.users.ceilings.effective)."""

    __tablename__ = "resource_ceilings"
    __table_args__ = (
        CheckConstraint("(role IS NULL) <> (user_id IS NULL)", name="ck_resource_ceilings_scope"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    role: Mapped[str | None] = mapped_column(String(16), unique=True)
    user_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), unique=True
    )
    memory_gb: Mapped[float | None] = mapped_column(Float)
    cpus: Mapped[float | None] = mapped_column(Float)
    disk_gb: Mapped[float | None] = mapped_column(Float)
    max_processes: Mapped[int | None] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
