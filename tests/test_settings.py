"""Worker settings of multi-node runs (app/settings.py): how other hosts reach this worker's
jobs, and which interface NCCL/Gloo use."""

from __future__ import annotations

import ipaddress

import pytest
from pydantic import ValidationError

from app.settings import Settings, primary_address


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
