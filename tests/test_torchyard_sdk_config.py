"""`torchyard.init(config=...)` in a real job on the live stack: every key becomes the run's
params (`params.<key>`, nested keys dotted as the launch config's), the launch's params win
where both give a key and the run says so, and the keys filter the runs list, are there to group
by, and are in both export formats."""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
import torch

from tests.conftest import WORKSPACE_DIR, wait_for_status
from tests.stack import LiveStack
from tests.test_cli import Cli, logged_in_cli
from torchyard.sdk import json_safe

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "workspace_scripts" / "init_config.py"


@pytest.fixture(scope="module")
def api(live_stack: LiveStack) -> Iterator[httpx.Client]:
    with live_stack.admin_client() as client:
        yield client


@pytest.fixture(scope="module")
def cli(live_stack: LiveStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    yield logged_in_cli(live_stack, tmp_path_factory.mktemp("cli-init") / "cli.json")


@pytest.fixture(scope="module")
def job(api: httpx.Client) -> tuple[int, int]:
    """(experiment id, run id) of the script's run, ended."""
    target = WORKSPACE_DIR / "initconfig"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPT, target / SCRIPT.name)
    config = {"script": f"initconfig/{SCRIPT.name}", "params": {"lr": 0.1}}
    name = f"init-config-{secrets.token_hex(3)}"
    exp = api.post("/api/experiments", json={"name": name, "config": config})
    assert exp.status_code == 201, exp.text
    run_id = api.post(f"/api/experiments/{exp.json()['id']}/runs").json()["id"]
    run = wait_for_status(api, run_id, {"succeeded", "failed", "cancelled"}, timeout=180)
    assert run["status"] == "succeeded", api.get(f"/api/runs/{run_id}/logs").text
    return exp.json()["id"], run_id


def test_init_config_keys_are_the_runs_params_and_the_launch_wins(
    api: httpx.Client, job: tuple[int, int]
) -> None:
    _exp, run_id = job
    assert "lr used: 0.1" in api.get(f"/api/runs/{run_id}/logs").text
    run = api.get(f"/api/runs/{run_id}").json()
    params = run["params"]
    assert params["params.lr"] == 0.1  # the launch's
    assert params["params.batch_size"] == 64
    assert params["params.model.depth"] == 3
    assert params["params.model.act"] == "relu"
    assert params["params.model.widths"] == [8, 16]
    assert params["params.use_amp"] is True
    said = [line for line in run["notices"] if line.startswith("params.lr:")]
    assert said == [
        "params.lr: the launch's 0.1 is used; the script's torchyard.init(config=...) gave 0.5"
    ]


def test_init_config_keys_filter_the_runs_and_are_there_to_group_by(
    api: httpx.Client, job: tuple[int, int]
) -> None:
    exp_id, run_id = job
    for condition, found in (("params.model.depth>=3", [run_id]), ("model.act=gelu", [])):
        got = api.get("/api/runs", params={"experiment_id": exp_id, "filter": condition})
        assert got.status_code == 200, got.text
        assert [r["id"] for r in got.json()["runs"]] == found, condition
    # The runs table groups by a key of the listed runs' params (app/static/lib/groups.js).
    listed = api.get("/api/runs", params={"experiment_id": exp_id}).json()["runs"]
    assert listed[0]["params"]["params.model.act"] == "relu"


def test_init_config_keys_are_in_both_export_formats(
    cli: Cli, job: tuple[int, int], tmp_path: Path
) -> None:
    exp_id, run_id = job
    for fmt, read in (("csv", pd.read_csv), ("parquet", pd.read_parquet)):
        target = tmp_path / f"runs.{fmt}"
        done = cli("export", str(exp_id), "--format", fmt, "-o", str(target))
        assert done.returncode == 0, done.stderr
        row = read(target).set_index("id").loc[run_id]
        assert row["params.model.depth"] == 3, fmt
        assert row["params.model.act"] == "relu", fmt
        assert row["params.batch_size"] == 64, fmt
        assert row["params.lr"] == 0.1, fmt


def test_a_config_is_recorded_as_json_holds_it() -> None:
    """What a script passes (numpy and torch scalars, a path, NaN, tuples) as JSON values."""
    config = {
        "lr": np.float32(0.5),
        "steps": np.int64(3),
        "w": torch.tensor(2.0),
        "amp": np.bool_(True),
        "root": Path("/data"),
        "bad": float("nan"),
        "sizes": (1, 2),
        3: {"nested": None},
    }
    assert json_safe(config) == {
        "lr": 0.5,
        "steps": 3,
        "w": 2.0,
        "amp": True,
        "root": "/data",
        "bad": None,
        "sizes": [1, 2],
        "3": {"nested": None},
    }
