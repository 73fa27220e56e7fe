"""The settings (app/settings.py): every duration validated the same way, settings that cannot
work together refused at start naming both, the cadences derived from the lease TTL in one
place; and the worker settings of multi-node runs (how other hosts reach this worker's jobs,
which interface NCCL/Gloo use)."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from app.settings import Settings, primary_address
from app.settings_rules import host_heartbeat_seconds, run_stamp_seconds
from tests.stack import REPO


def test_the_worker_address_defaults_to_the_primary_one_and_the_interface_is_a_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TORCHYARD_WORKER_ADDRESS", raising=False)
    assert Settings().resolved_worker_address == primary_address()
    ipaddress.ip_address(primary_address())  # an address, never a name or ""
    monkeypatch.setenv("TORCHYARD_WORKER_ADDRESS", "10.0.0.7")
    monkeypatch.setenv("TORCHYARD_WORKER_INTERFACE", "eth1")
    settings = Settings()
    assert settings.resolved_worker_address == "10.0.0.7" and settings.worker_interface == "eth1"
    monkeypatch.setenv("TORCHYARD_WORKER_INTERFACE", "eth1; rm -rf /")
    with pytest.raises(ValidationError):
        Settings()


DURATIONS = [n for n in Settings.model_fields if n.endswith(("_seconds", "_hours"))]


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_every_duration_refuses_a_negative_or_not_finite_value(value: float) -> None:
    """Issue 39: some were checked > 0, some >= 1, some not at all (a NaN interval was a
    loop that never ran)."""
    assert len(DURATIONS) > 30
    accepted = []
    for name in DURATIONS:
        try:
            Settings.model_validate({name: value})
        except ValidationError:
            continue
        accepted.append(name)
    assert accepted == []


def test_a_duration_that_must_pass_refuses_zero_and_one_that_can_be_off_takes_it() -> None:
    with pytest.raises(ValidationError, match="run_lost_seconds"):
        Settings(run_lost_seconds=0)
    with pytest.raises(ValidationError, match="forwarder_interval_seconds"):
        Settings(forwarder_interval_seconds=0)
    assert Settings(reap_interval_seconds=0, queue_resend_seconds=0).queue_resend_seconds == 0


@pytest.mark.parametrize(
    ("settings", "both"),
    [
        ({"run_heartbeat_seconds": 20}, ("RUN_HEARTBEAT_SECONDS", "LEASE_TTL_SECONDS")),
        (
            {"run_heartbeat_seconds": 10, "lease_ttl_seconds": 30, "run_lost_seconds": 8},
            ("RUN_HEARTBEAT_SECONDS", "RUN_LOST_SECONDS"),
        ),
        (
            {"run_heartbeat_seconds": 5, "spool_mark_fresh_seconds": 5},
            ("RUN_HEARTBEAT_SECONDS", "SPOOL_MARK_FRESH_SECONDS"),
        ),
        (
            {"database_url": "postgresql+psycopg://db/t", "db_idle_transaction_seconds": 60},
            ("DB_IDLE_TRANSACTION_SECONDS", "RUN_LOST_SECONDS"),
        ),
    ],
)
def test_settings_that_cannot_work_together_are_refused_naming_both(
    settings: dict[str, object], both: tuple[str, str]
) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(**settings)  # type: ignore[arg-type]
    said = str(refused.value)
    assert f"TORCHYARD_{both[0]}" in said and f"TORCHYARD_{both[1]}" in said, said


def test_the_idle_transaction_limit_binds_only_where_it_applies() -> None:
    """SQLite has no idle-transaction limit: the setting does nothing there."""
    sqlite = Settings(database_url="sqlite:///x.db", db_idle_transaction_seconds=120)
    assert sqlite.db_idle_transaction_seconds == 120
    off = Settings(database_url="postgresql+psycopg://db/t", db_idle_transaction_seconds=0)
    assert off.db_idle_transaction_seconds == 0


def test_the_cadences_follow_the_lease_ttl() -> None:
    default = Settings(lease_ttl_seconds=15, run_heartbeat_seconds=5)
    assert (run_stamp_seconds(default), host_heartbeat_seconds(default)) == (3.0, 5.0)
    short = Settings(
        lease_ttl_seconds=1,
        run_heartbeat_seconds=0.5,
        run_lost_seconds=3,
        db_idle_transaction_seconds=1,
    )
    assert (run_stamp_seconds(short), host_heartbeat_seconds(short)) == (0.2, 0.5)


def test_a_worker_with_settings_that_cannot_work_together_does_not_start() -> None:
    env = {**os.environ, "TORCHYARD_RUN_HEARTBEAT_SECONDS": "30", "PYTHONPATH": str(REPO)}
    started = subprocess.run(
        [sys.executable, "-P", "-m", "worker", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode != 0
    assert "TORCHYARD_RUN_HEARTBEAT_SECONDS (30.0) must be below" in started.stderr, started.stderr
    assert "TORCHYARD_LEASE_TTL_SECONDS (15.0)" in started.stderr


@pytest.mark.parametrize("parent", ["torchyard", "batch/torchyard", "a.b/c_d-1/torchyard"])
def test_the_job_cgroup_parent_may_be_nested(parent: str) -> None:
    assert Settings(job_cgroup_parent=parent).job_cgroup_parent == parent


@pytest.mark.parametrize(
    "parent", ["..", "batch/../..", "/torchyard", "batch/", "a/./b", ".hidden", "a b", "a/b/c/d/e"]
)
def test_a_job_cgroup_parent_that_could_leave_the_hierarchy_is_refused(parent: str) -> None:
    """The worker (root) makes folders at this path under each cgroup mount: no segment may
    climb out, be empty or hide."""
    with pytest.raises(ValidationError, match="job_cgroup_parent"):
        Settings(job_cgroup_parent=parent)
