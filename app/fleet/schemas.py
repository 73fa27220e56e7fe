"""The Fleet API's shapes (GET /api/fleet)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from app.timeutil import UtcDateTime

Window = Literal["24h", "7d", "30d"]
WINDOWS: dict[str, float] = {"24h": 24.0, "7d": 24.0 * 7, "30d": 24.0 * 30}  # hours


class FleetUserOut(BaseModel):
    """One user's GPU use over the window. ``util_mean``: the mean of every GPU utilisation
    sample of their runs in the window (None without samples); ``idle_gpu_hours``: each run's
    GPU-hours times the share of its samples below the idle threshold."""

    user_id: int
    username: str
    gpu_hours: float
    idle_gpu_hours: float
    util_mean: float | None
    gpu_runs: int
    runs_waiting: int


class FleetOut(BaseModel):
    window: Window
    since: UtcDateTime
    until: UtcDateTime
    idle_below_percent: float
    users: list[FleetUserOut]
