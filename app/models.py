"""Imports every domain's models so that Base.metadata is complete (Alembic, tests)."""

from app.auth.models import ApiToken, User
from app.experiments.models import Experiment
from app.metrics.models import Metric, MetricKey
from app.runs.models import Checkpoint, Run

__all__ = ["ApiToken", "Checkpoint", "Experiment", "Metric", "MetricKey", "Run", "User"]
