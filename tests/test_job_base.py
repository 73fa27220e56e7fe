"""The job base (worker/job_base.py) built from this very venv, which holds the whole server:
a job's Python imports torch, numpy, the torchyard SDK (its MLflow entry point included) and
tensorboard, and none of the server's packages; its key, and so every run environment's, does
not change when a package is added to the server's side."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from worker import job_base
from worker.env_build import Pip
from worker.environments import Cache, env_key

PROBE = """
import importlib, importlib.metadata as m
import torch, numpy, torchyard, tensorboard
from torch.utils.tensorboard import SummaryWriter
print("store", [e.value for e in m.entry_points(group="mlflow.tracking_store")])
for name in ("sqlalchemy", "fastapi", "celery", "alembic", "optuna", "redis", "uvicorn"):
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
        f"hidden {n}"
        for n in ("sqlalchemy", "fastapi", "celery", "alembic", "optuna", "redis", "uvicorn")
    ]
    names = {p.split("==")[0] for p in base.packages}
    assert {"torch", "numpy", "torchyard", "tensorboard", "protobuf"} <= names
    assert not names & {"sqlalchemy", "fastapi", "celery", "alembic", "optuna", "redis"}


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
