"""What MLflow keeps about an experiment that torchyard's experiments do not: its tags and its
lifecycle stage (MLflow deletes an experiment softly: ``experiments/delete`` marks it, ``restore``
unmarks it). Written by app.mlflow.experiments alone; both go with the experiment when torchyard
deletes it (ON DELETE CASCADE)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.orm_base import Base
from app.timeutil import utcnow


class MlflowExperimentTag(Base):
    __tablename__ = "mlflow_experiment_tags"

    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(250), primary_key=True)
    value: Mapped[str] = mapped_column(Text, default="")


class MlflowDeletedExperiment(Base):
    """An experiment MLflow's client deleted: hidden from MLflow's active searches, its
    lifecycle_stage "deleted"; torchyard's own pages still list it until it is deleted there."""

    __tablename__ = "mlflow_deleted_experiments"

    experiment_id: Mapped[int] = mapped_column(
        ForeignKey("experiments.id", ondelete="CASCADE"), primary_key=True
    )
    deleted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
