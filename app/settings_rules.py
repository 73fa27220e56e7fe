"""What the settings must satisfy beyond each field's own bounds (app/settings.py), and the
cadences derived from them: the duration types every interval setting has, the pairs of
settings that cannot work together (refused at start, naming both), and how often a worker
stamps its runs and its host, derived from the lease TTL here alone so every loop agrees."""

from __future__ import annotations

from typing import Annotated, Protocol

from pydantic import Field

# Every duration setting has one of these types, so each means the same: a finite number of
# seconds (hours), never negative, never NaN or infinity (a typo that would otherwise surface
# as a loop that spins or never runs). Seconds: a time that must pass (a cadence, a timeout,
# a limit: 0 would be a busy loop or an instant failure). SecondsOrOff: 0 means "none" or
# "never", as each setting's comment says (no grace, a loop turned off).
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
SecondsOrOff = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Hours = Annotated[float, Field(gt=0, allow_inf_nan=False)]

# A cgroup path below each controller's root that a root worker makes folders at: 1-4
# segments, none empty or starting with a dot (so none is `.` or `..`: nothing climbs out).
CGROUP_PARENT = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}(/[A-Za-z0-9_-][A-Za-z0-9_.-]{0,63}){0,3}$"


class Settings(Protocol):
    """What these rules read of app.settings.Settings (which imports this module)."""

    lease_ttl_seconds: float
    run_heartbeat_seconds: float
    db_idle_transaction_seconds: float

    @property
    def resolved_database_url(self) -> str: ...


def must_be_below(settings: Settings) -> list[tuple[str, str, str]]:
    """(setting, the setting it must be below, why), as app/settings.py's comments say."""
    pairs = [
        (
            "run_heartbeat_seconds",
            "lease_ttl_seconds",
            "a lease not renewed within its TTL is freed while its run trains",
        ),
        (
            "run_heartbeat_seconds",
            "run_lost_seconds",
            "a run whose heartbeat comes slower than that is reaped as lost while it trains",
        ),
        (
            "run_heartbeat_seconds",
            "spool_mark_fresh_seconds",
            "the worker refreshes a job's ingestion mark every heartbeat; a staler mark "
            "lets the job log past its backlog limit",
        ),
    ]
    on_postgres = not settings.resolved_database_url.startswith("sqlite")
    if settings.db_idle_transaction_seconds > 0 and on_postgres:
        pairs.append(
            (
                "db_idle_transaction_seconds",
                "run_lost_seconds",
                "a process frozen mid-transaction keeps its row locks that long, and the "
                "reaper waiting on them cannot hand a lost run over in time",
            )
        )
    return pairs


def refuse_conflicts(settings: Settings) -> None:
    """ValueError naming both settings of the first pair that cannot work together: the
    server, the worker and `torchyard up` refuse to start instead of failing at run time."""
    for small, large, why in must_be_below(settings):
        if getattr(settings, small) >= getattr(settings, large):
            raise ValueError(
                f"TORCHYARD_{small.upper()} ({getattr(settings, small)}) must be below "
                f"TORCHYARD_{large.upper()} ({getattr(settings, large)}): {why}"
            )


def run_stamp_seconds(settings: Settings) -> float:
    """How often a worker stamps each run it trains (worker.heartbeat) and renews its GPU
    leases: every run_heartbeat_seconds, and at least five times per lease TTL so a lease
    never nears its expiry."""
    return min(settings.lease_ttl_seconds / 5, settings.run_heartbeat_seconds)


def host_heartbeat_seconds(settings: Settings) -> float:
    """How often an idle worker says its host is there (worker.scheduled): three times per
    lease TTL, never more often than every 0.5 s however short the TTL."""
    return max(0.5, settings.lease_ttl_seconds / 3)
