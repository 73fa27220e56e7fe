"""The settings of GPU efficiency (issue 42, docs/fleet.md "Efficiency"): a part of the one
settings class (app/settings.py inherits it), kept here so that each module stays small."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from app.settings_rules import Seconds


class EfficiencySettings(BaseSettings):
    # A running run's mean / p95 GPU utilisation and peak GPU memory
    # (app/metrics/gpu_efficiency.py) are refreshed this often by its worker, and once more at
    # its end.
    gpu_summary_seconds: Seconds = Field(default=60.0, ge=1)
    # A leased GPU is idle while its utilisation is below this (%): the run notice, the
    # GPU-idle alert and the Fleet page's idle GPU-hours all count it so (1: 0% is idle).
    gpu_idle_below_percent: float = Field(default=1.0, ge=0, le=100, allow_inf_nan=False)
    # A running run whose GPUs stayed idle this many minutes (notify_minute_seconds each) gets
    # a notice on its run page; its owner's GPU-idle alert keeps its own N minutes.
    gpu_idle_minutes: float = Field(default=30.0, gt=0, allow_inf_nan=False)
