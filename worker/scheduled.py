"""The worker's own periodic work (app.periodic): the idle host heartbeat, every third of the
lease TTL (never more often than every 0.5 s, however short the TTL), so that the scheduler
counts this host's GPUs as there."""

from __future__ import annotations

from app.periodic import Process, declare
from app.settings import Settings
from app.settings_rules import host_heartbeat_seconds
from worker.runner import heartbeat_host


def heartbeat_interval(settings: Settings) -> float:
    return host_heartbeat_seconds(settings)


HOST_HEARTBEAT = declare(
    "worker.host_heartbeat", heartbeat_host, every=heartbeat_interval, runs_in={Process.WORKER}
)
