"""Counters kept in the database: every API process reads the same totals, every worker host
adds to them (an in-process Prometheus counter sees only its own process)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.orm_base import Base


class OpsCounter(Base):
    __tablename__ = "ops_counters"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    shard: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
