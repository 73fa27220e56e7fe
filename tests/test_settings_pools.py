"""A worker's pool and executor settings (app/settings_pools.py): a Slurm worker refuses to
start without its partition, its shared folder or a pool of its own, naming what is missing."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.settings import Settings


def test_the_default_worker_serves_the_local_pool_with_processes() -> None:
    settings = Settings()
    assert (settings.worker_pool, settings.worker_executor) == ("local", "process")


@pytest.mark.parametrize(
    ("env", "named"),
    [
        (
            {"TORCHYARD_WORKER_POOL": "gpu-cluster"},
            "TORCHYARD_SLURM_PARTITION and TORCHYARD_SLURM_SHARED_DIR",
        ),
        (
            {"TORCHYARD_WORKER_POOL": "gpu-cluster", "TORCHYARD_SLURM_PARTITION": "debug"},
            "TORCHYARD_SLURM_SHARED_DIR",
        ),
        (
            {"TORCHYARD_SLURM_PARTITION": "debug", "TORCHYARD_SLURM_SHARED_DIR": "/shared"},
            "TORCHYARD_WORKER_POOL",
        ),
    ],
)
def test_a_slurm_worker_names_what_it_lacks(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    monkeypatch.setenv("TORCHYARD_WORKER_EXECUTOR", "slurm")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValidationError, match=named):
        Settings()


def test_a_pool_name_is_a_plain_word(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHYARD_WORKER_POOL", "../etc")
    with pytest.raises(ValidationError, match="worker_pool"):
        Settings()
