"""Imports every domain's models so that Base.metadata is complete (Alembic, tests)."""

from app.auth.models import ApiToken, User
from app.experiments.models import Experiment
from app.gpus.models import GpuLease, WorkerHost
from app.metrics.models import Metric, MetricKey
from app.runs.models import Checkpoint, Run, RunImage, RunParam
from app.sweeps.models import Sweep, SweepTrial

__all__ = [
    "ApiToken",
    "Checkpoint",
    "Experiment",
    "GpuLease",
    "Metric",
    "MetricKey",
    "Run",
    "RunImage",
    "RunParam",
    "Sweep",
    "SweepTrial",
    "User",
    "WorkerHost",
]
