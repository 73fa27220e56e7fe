"""A sweep and its trials. The sweep's whole state is these rows plus the trials' runs: the
driver (app.sweeps.driver) rebuilds the Optuna study from them every time it asks for a trial,
so nothing of a sweep lives only in a process's memory and any worker or API may advance it.

Trials are rows of their own, (sweep_id, number) the primary key: two advances racing for
trial N cannot both insert it (the backstop behind the row lock the driver takes). The run a
trial launched may be deleted later (DELETE /api/runs/{id}): the trial stays, run_id NULL, and
counts as ended without a value, so the sweep neither re-launches its number nor stalls.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Enum, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.orm_base import Base
from app.timeutil import utcnow


class SweepStatus(enum.StrEnum):
    running = "running"  # launching trials, or waiting for them
    succeeded = "succeeded"  # every planned trial ended (each as it did: failed ones count)
    cancelled = "cancelled"

    @property
    def finished(self) -> bool:
        return self is not SweepStatus.running


class Sweep(Base):
    __tablename__ = "sweeps"

    id: Mapped[int] = mapped_column(primary_key=True)
    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), index=True
    )
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    status: Mapped[SweepStatus] = mapped_column(
        Enum(
            SweepStatus,
            native_enum=False,
            length=16,
            validate_strings=True,
            values_callable=lambda statuses: [s.value for s in statuses],
        ),
        default=SweepStatus.running,
        index=True,
    )
    method: Mapped[str] = mapped_column(String(16))  # grid | random | tpe
    metric: Mapped[str] = mapped_column(String(255))
    goal: Mapped[str] = mapped_column(String(16))  # maximize | minimize
    # {config path: {"values": [...]} | {"distribution": ..., "min": ..., "max": ...}}, as
    # validated by app.sweeps.spec (its key order is the grid's order).
    parameters: Mapped[dict[str, Any]] = mapped_column(JSON)
    max_runs: Mapped[int] = mapped_column(Integer)
    max_concurrent: Mapped[int] = mapped_column(Integer)
    # {"type": "median"|"asha", ...its knobs}; NULL: every trial runs to its end.
    early_stop: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The samplers' seed: trial N's sampler is seeded from (seed, N) (app.sweeps.sampling).
    seed: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Stamped by every advance: its first statement, so it takes the row's write lock first.
    advanced_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class SweepTrial(Base):
    __tablename__ = "sweep_trials"

    sweep_id: Mapped[int] = mapped_column(
        ForeignKey("sweeps.id", ondelete="CASCADE"), primary_key=True
    )
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int | None] = mapped_column(
        ForeignKey("runs.id", ondelete="SET NULL"), unique=True
    )
    # The sampled values by config path ({"params.lr": 0.01}): what the sampler chose.
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
