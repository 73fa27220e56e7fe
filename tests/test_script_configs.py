"""Script configs through the API: a script in the workspace is accepted with its args and
params; anything that would run code from elsewhere is a 422 naming the reason, never a run."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.db import session_scope
from app.experiments.models import Experiment
from app.runs.models import Run
from tests.conftest import WORKSPACE_DIR
from tests.factories import DEFAULT_LIMITS


def count(model: type) -> int:
    with session_scope() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


@pytest.fixture(scope="module", autouse=True)
def scripts() -> None:
    (WORKSPACE_DIR / "api_tests").mkdir(exist_ok=True)
    (WORKSPACE_DIR / "api_tests" / "train.py").write_text("print('training')\n")
    (WORKSPACE_DIR / "api_tests" / "readme.md").write_text("")
    outside = WORKSPACE_DIR.parent / "outside.py"
    outside.write_text("print('not yours')\n")
    link = WORKSPACE_DIR / "api_tests" / "escape.py"
    if not link.is_symlink():
        link.symlink_to(outside)


def test_a_workspace_script_is_accepted_with_args_and_params(client, user_headers) -> None:
    config = {
        "script": "api_tests/train.py",
        "args": ["--data", "digits"],
        "params": {"lr": 0.01, "epochs": 2, "amp": True, "name": "x"},
        "resources": {"nproc": 2},
    }
    r = client.post("/api/experiments", json={"name": "s", "config": config}, headers=user_headers)
    assert r.status_code == 201, r.text
    stored = r.json()["config"]
    assert stored["script"] == "api_tests/train.py" and stored["args"] == ["--data", "digits"]
    assert stored["params"] == {"lr": 0.01, "epochs": 2, "amp": True, "name": "x"}
    assert stored["resources"] == {
        "gpus": 0,
        "nproc": 2,
        "launcher": "torchrun",
        "pool": "local",
        **DEFAULT_LIMITS,
    }
    run = client.post(f"/api/experiments/{r.json()['id']}/runs", headers=user_headers)
    assert run.status_code == 201, run.text
    assert run.json()["config"]["script"] == "api_tests/train.py"


@pytest.mark.parametrize(
    ("script", "needle"),
    [
        ("../outside.py", "leaves the workspace"),
        ("api_tests/../../outside.py", "leaves the workspace"),
        (str(WORKSPACE_DIR / "api_tests" / "train.py"), "absolute path"),
        ("/etc/passwd", "absolute path"),
        ("api_tests/escape.py", "outside the workspace"),
        ("api_tests/missing.py", "does not exist"),
        ("api_tests/readme.md", "not a Python file"),
        ("api_tests", "not a Python file"),
    ],
)
def test_scripts_outside_the_workspace_are_422_and_store_nothing(
    client, user_headers, script: str, needle: str
) -> None:
    before = count(Experiment), count(Run)
    r = client.post(
        "/api/experiments", json={"name": "s", "config": {"script": script}}, headers=user_headers
    )
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "config", "script"]
    assert needle in error["msg"]
    assert (count(Experiment), count(Run)) == before


def test_an_override_cannot_point_a_run_outside_the_workspace(client, user_headers) -> None:
    r = client.post(
        "/api/experiments",
        json={"name": "s", "config": {"script": "api_tests/train.py"}},
        headers=user_headers,
    )
    before = count(Run)
    bad = client.post(
        f"/api/experiments/{r.json()['id']}/runs",
        json={"overrides": {"script": "../outside.py"}},
        headers=user_headers,
    )
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["body", "overrides", "script"]
    assert count(Run) == before


@pytest.mark.parametrize(
    ("config", "loc", "needle"),
    [
        (
            {"script": "api_tests/train.py", "recipe": "tiny_mlp"},
            ["script"],
            "either a recipe or a script",
        ),
        ({"script": "api_tests/train.py", "params": {"--lr": 1}}, ["params", "--lr"], "pattern"),
        ({"script": "api_tests/train.py", "params": {"lr": [1, 2]}}, ["params", "lr"], "valid"),
        ({"script": "api_tests/train.py", "args": "--lr 1"}, ["args"], "valid list"),
        ({"script": "api_tests/train.py", "entry": "main"}, ["entry"], "unknown key 'entry'"),
        ({"script": 3}, ["script"], "valid string"),
        # issue 29: a run's `env` never sets the service's variables nor the worker's
        ({"script": "api_tests/train.py", "env": {"TORCHYARD_X": "1"}}, ["env"], "TORCHYARD_X"),
        (
            {
                "script": "api_tests/train.py",
                "env": {"HF_HUB_OFFLINE": "1", "AWS_SECRET_ACCESS_KEY": "k"},
            },
            ["env"],
            "AWS_SECRET_ACCESS_KEY",
        ),
        ({"script": "api_tests/train.py", "env": {"my_token": "t"}}, ["env"], "my_token"),
        (
            {"script": "api_tests/train.py", "env": {"CUDA_VISIBLE_DEVICES": "0"}},
            ["env"],
            "CUDA_VISIBLE_DEVICES: set by the worker",
        ),
        ({"script": "api_tests/train.py", "env": {"A=B": "x"}}, ["env", "A=B"], "pattern"),
        ({"script": "api_tests/train.py", "env": {"X": 1}}, ["env", "X"], "valid string"),
    ],
)
def test_malformed_script_configs_are_422_at_the_field(
    client, user_headers, config: dict, loc: list, needle: str
) -> None:
    r = client.post("/api/experiments", json={"name": "s", "config": config}, headers=user_headers)
    assert r.status_code == 422, r.text
    errors = r.json()["detail"]
    assert any(
        e["loc"][: 2 + len(loc)] == ["body", "config", *loc] and needle in e["msg"] for e in errors
    ), errors


def test_the_workspace_dir_is_where_scripts_come_from() -> None:
    from app.settings import get_settings

    assert Path(get_settings().workspace_dir) == WORKSPACE_DIR


def test_launcher_none_with_several_processes_is_a_422_that_says_why(client, user_headers) -> None:
    config = {"recipe": "tiny_mlp", "resources": {"nproc": 2, "launcher": "none"}}
    r = client.post("/api/experiments", json={"name": "x", "config": config}, headers=user_headers)
    assert r.status_code == 422
    assert "nproc must be 1" in r.text
