"""The job base (worker/job_base.py) built from this very venv, which holds the whole server:
a job's Python imports torch, numpy, the torchyard SDK (its MLflow entry point included),
tensorboard and mlflow, and none of the server's own packages (FastAPI and uvicorn only as
mlflow-skinny's requirements); its key, and so every run environment's, does
not change when a package is added to the server's side."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from torchyard.contract import RUN_DIR_VAR, RUN_ID_VAR, RunPaths
from worker import job_base
from worker.env_build import Pip
from worker.environments import Cache, env_key
from worker.launcher import MLFLOW_TRACKING_URI as TRACKING_URI

PROBE = """
import importlib, importlib.metadata as m
import torch, numpy, torchyard, tensorboard
from torch.utils.tensorboard import SummaryWriter
print("store", [e.value for e in m.entry_points(group="mlflow.tracking_store")])
for name in ("sqlalchemy", "celery", "alembic", "optuna", "redis"):
    try:
        importlib.import_module(name)
        print("visible", name)
    except ImportError:
        print("hidden", name)
"""


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> job_base.JobBase:
    return job_base.ensure(tmp_path_factory.mktemp("envs"))


def test_a_job_sees_torch_numpy_the_sdk_and_tensorboard_never_the_server(
    base: job_base.JobBase,
) -> None:
    out = subprocess.run(
        [str(base.python), "-c", PROBE], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == "store ['torchyard.mlflow_store:TorchyardStore']"
    assert out[1:] == [
        f"hidden {n}" for n in ("sqlalchemy", "celery", "alembic", "optuna", "redis")
    ]
    names = {p.split("==")[0] for p in base.packages}
    assert {"torch", "numpy", "torchyard", "tensorboard", "protobuf", "mlflow-skinny"} <= names
    assert not names & {"sqlalchemy", "celery", "alembic", "optuna", "redis"}


def test_a_package_added_to_the_server_changes_no_key(
    base: job_base.JobBase, tmp_path: Path
) -> None:
    """A server-only distribution in another site folder of the worker (as `pip install` into
    its venv would add one): the base, and a run environment's key over it, stay the same."""
    extra = tmp_path / "site"
    info = extra / "zz_server_only-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zz-server-only\nVersion: 1.0\n")
    (info / "RECORD").write_text("zz_server_only-1.0.dist-info/METADATA,,\n")
    dirs = job_base.worker_site_dirs()
    again = job_base.ensure(base.path.parent, site_dirs=(*dirs, str(extra)))
    assert again == base
    assert env_key(["tomli-w==1.2.0"], again) == env_key(["Tomli_W == 1.2.0"], base)
    # the cached environment is reused, not built again
    root = base.path.parent
    with Cache(root, 10**12).use([], Pip(tmp_path, timeout=60)) as first:
        pass
    with Cache(root, 10**12, site_dirs=(*dirs, str(extra))).use([], Pip(tmp_path, 60)) as again_env:
        assert not again_env.built and again_env.key == first.key
    # what the key used to hash, every package of the worker, did change
    with_extra = job_base._installed((*dirs, str(extra)))
    assert "zz-server-only" in with_extra and "zz-server-only" not in job_base._installed(dirs)


def test_a_folder_shared_with_a_server_package_is_linked_child_by_child() -> None:
    def dist(name: str, *files: str) -> job_base._Dist:
        parts = tuple(tuple(f.split("/")) for f in files)
        return job_base._Dist(name, "1", "/site", (), parts)

    installed = {
        "protobuf": dist("protobuf", "google/protobuf/__init__.py", "protobuf.dist-info/RECORD"),
        "server-google": dist("server-google", "google/cloud/__init__.py"),
        "torch": dist("torch", "torch/__init__.py", "torch/lib/x.so"),
    }
    plan = job_base.link_plan(installed, {"protobuf", "torch"}, "/site")
    assert plan == [("google", "protobuf"), ("protobuf.dist-info",), ("torch",)]


MLFLOW_PROBE = """
import importlib, json, sys
import mlflow
from mlflow import MlflowClient
with mlflow.start_run() as run:
    mlflow.log_param("lr", 0.01)
    mlflow.log_metric("loss", 0.5, step=1)
MlflowClient().log_metric(run.info.run_id, "loss", 0.25, step=2)
for name in ("sqlalchemy", "celery"):
    try:
        importlib.import_module(name)
        print("visible", name)
    except ImportError:
        print("hidden", name)
"""


def test_mlflow_is_in_every_job_with_nothing_configured(
    base: job_base.JobBase, tmp_path: Path
) -> None:
    """`import mlflow` with nothing configured: the fluent and client APIs log into the job's
    spool (torchyard.mlflow_store); the server's SQLAlchemy and Celery stay out of sight."""
    assert "mlflow-skinny" in {p.split("==")[0] for p in base.packages}
    env = {
        "MLFLOW_TRACKING_URI": TRACKING_URI,
        RUN_DIR_VAR: str(tmp_path),
        RUN_ID_VAR: "7",
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
    }
    done = subprocess.run(
        [str(base.python), "-c", MLFLOW_PROBE], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["hidden sqlalchemy", "hidden celery"]
    lines = [json.loads(line) for line in RunPaths(tmp_path).metrics.read_text().splitlines()]
    assert {"type": "params", "values": {"lr": "0.01"}} in lines
    steps = {line["step"]: line["values"] for line in lines if line["type"] == "metrics"}
    assert steps == {1: {"loss": 0.5}, 2: {"loss": 0.25}}
