from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.orm_base import Base
from app.timeutil import utcnow


class Experiment(Base):
    __tablename__ = "experiments"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), index=True)
    description: Mapped[str] = mapped_column(Text, default="")
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # The experiment's own "best" metric and direction ("max"/"min"), chosen by its owner
    # (PATCH /api/experiments/{id}); NULL: none, the sweep's or checkpoint metric is used
    # (app/experiments/best.py).
    best_metric: Mapped[str | None] = mapped_column(String(255), default=None)
    best_mode: Mapped[str | None] = mapped_column(String(8), default=None)
