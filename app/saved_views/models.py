"""Saved views: a named state of an experiment page (filter, sort, columns, grouping, charts)
that its owner reopens, or shares with the team by its URL.

Written only by app.saved_views.service. `default_of` is the experiment whose page opens with
this view when no other is asked for; it is unique, so an experiment has at most one default
(several NULLs are allowed by SQLite and PostgreSQL alike), and the database itself keeps
the rule when two owners set a default at once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from app.orm_base import Base
from app.timeutil import utcnow


class SavedView(Base):
    __tablename__ = "saved_views"

    id: Mapped[int] = mapped_column(primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    # None: a view of no particular experiment (its state applies to any experiment page).
    experiment_id: Mapped[int | None] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(200))
    shared: Mapped[bool] = mapped_column(Boolean, default=False)
    # As validated by app.saved_views.schemas.ViewState (bounded in size and depth).
    state: Mapped[dict[str, Any]] = mapped_column(JSON)
    default_of: Mapped[int | None] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), unique=True
    )
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
