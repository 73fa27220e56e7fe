"""The settings of interactive sessions (app/sessions, issue 42): a part of the one settings
class (app/settings.py inherits it), kept here so that each module stays small."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings

from app.settings_rules import SecondsOrOff


class SessionSettings(BaseSettings):
    # A session whose JupyterLab saw no activity (no kernel busy, no request of its page; its
    # /api/status `last_activity`) and whose GPUs were idle for this many minutes is ended,
    # its files kept; 0: never for idleness (its time limit still holds).
    session_idle_minutes: float = Field(default=60, ge=0, le=7 * 24 * 60, allow_inf_nan=False)
    # A GPU at or below this utilisation (percent, NVML's) counts as idle for that rule.
    session_idle_gpu_percent: float = Field(default=5, ge=0, le=100, allow_inf_nan=False)
    # How often the API checks each running session's time and idle limits (0: never).
    session_check_seconds: SecondsOrOff = 30
    # The warning on a session's page before its time limit ends it.
    session_warning_minutes: float = Field(default=10, ge=0, le=24 * 60, allow_inf_nan=False)
