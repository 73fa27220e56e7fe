"""Imports every domain's models so that Base.metadata is complete (Alembic, tests)."""

from app.auth.models import ApiToken, User
from app.code.models import CodeSnapshot
from app.experiments.models import Experiment
from app.gpus.models import GpuLease, WorkerHost
from app.metrics.models import Metric, MetricKey, MetricOverview
from app.mlflow.models import MlflowDeletedExperiment, MlflowExperimentTag
from app.notifications.models import Delivery, NotificationSettings
from app.ops.models import OpsCounter
from app.runs.models import Checkpoint, Run, RunImage, RunParam
from app.saved_views.models import SavedView
from app.sweeps.models import Sweep, SweepTrial
from app.users.models import ResourceCeiling

__all__ = [
    "ApiToken",
    "Checkpoint",
    "CodeSnapshot",
    "Delivery",
    "Experiment",
    "GpuLease",
    "Metric",
    "MetricKey",
    "MetricOverview",
    "MlflowDeletedExperiment",
    "MlflowExperimentTag",
    "NotificationSettings",
    "OpsCounter",
    "ResourceCeiling",
    "Run",
    "RunImage",
    "RunParam",
    "SavedView",
    "Sweep",
    "SweepTrial",
    "User",
    "WorkerHost",
]
