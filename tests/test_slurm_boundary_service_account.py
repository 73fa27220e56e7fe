"""A Slurm worker run as the service's own account (issue 40; docs/clusters.md, "Who the job
is"): a system user made for the test, the API and the Slurm worker run as it (setpriv), on a
database, broker and data folder of its own that it owns, against a private Slurm cluster
(tests/slurm_cluster.py, its daemons root's). The run's job is submitted by the account, so
Slurm runs it as the account; bwrap sandboxes it in an unprivileged user namespace.

The worker's interpreter must be one the account can execute, inside and outside bwrap:
TORCHYARD_TEST_SERVICE_PYTHON, else the repo's .venv-service (`make service-venv`, part of `make
test`: the system's python3 with the server extra), else the suite's own. Where the account
cannot run it the test skips saying why, and fails on CI (CI=true), which builds .venv-service.
Without Slurm the module skips, on CI it fails."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.slurm_cluster import PARTITION, slurm_cluster
from tests.stack import LiveStack, free_port, start_logged, stop_process, wait_healthy
from tests.waits import wait_for
from torchyard.compose.processes import server_argv, worker_argv

pytestmark = pytest.mark.slow

PASSWORD = "service-account-pw-1"
ENDED = {"succeeded", "failed", "cancelled"}


SERVICE_VENV_PYTHON = Path(__file__).resolve().parent.parent / ".venv-service" / "bin" / "python"


def service_python() -> str:
    chosen = os.environ.get("TORCHYARD_TEST_SERVICE_PYTHON")
    if chosen:
        return chosen
    return str(SERVICE_VENV_PYTHON) if SERVICE_VENV_PYTHON.exists() else sys.executable


@pytest.fixture(scope="module")
def account() -> Iterator[pwd.struct_passwd]:
    name = f"tysvc{os.getpid()}"
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", name], check=True
    )
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False)


def why_not_runnable(python: str, account: pwd.struct_passwd) -> str | None:
    """Why the account cannot run the worker on `python` outside and inside bwrap (None: it
    can). The sandbox binds the interpreter's real path: a folder on it that only its owner may
    enter (a pyenv under /root, 0700) leaves bwrap nothing to exec, and the worker's jobs are
    not sandboxed."""
    real = Path(python).resolve()
    closed = [str(p) for p in real.parents if not p.stat().st_mode & 0o001]
    if closed:
        return f"{python} is {real}, under {closed[0]}, which other users cannot enter"
    probe = [*as_account(account), python, "-c", "import app, worker"]
    done = subprocess.run(probe, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"the account cannot run {python}: {done.stderr.strip()[-300:]}"
    return None


def as_account(account: pwd.struct_passwd) -> list[str]:
    return ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--clear-groups"]


def test_a_service_account_worker_runs_its_job_sandboxed_as_the_account(
    account: pwd.struct_passwd,
) -> None:
    python = service_python()
    why = why_not_runnable(python, account)
    if why is not None:  # the machine's interpreter, not the product; CI builds one that works
        message = f"{why} (run `make service-venv` or set TORCHYARD_TEST_SERVICE_PYTHON)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the service account's test: {message}")
        pytest.skip(message)
    folder = Path(tempfile.mkdtemp(prefix="ty-svc-", dir="/tmp"))
    folder.chmod(0o755)
    os.chown(folder, account.pw_uid, account.pw_gid)
    data = folder / "data"
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
        "HOME": str(folder),
        "PYTHONUNBUFFERED": "1",
        "TORCHYARD_DATA_DIR": str(data),
        "TORCHYARD_DATABASE_URL": f"sqlite:///{folder / 'torchyard.db'}",
        "TORCHYARD_BROKER_URL": f"sqla+sqlite:///{folder / 'broker.db'}",
        "TORCHYARD_ADMIN_PASSWORD": PASSWORD,
        "TORCHYARD_WORKER_HOST": "svc-submit",
        "TORCHYARD_WORKER_EXECUTOR": "slurm",
        "TORCHYARD_WORKER_POOL": "cluster",
        "TORCHYARD_SLURM_SHARED_DIR": str(folder),
        "TORCHYARD_SLURM_PARTITION": PARTITION,
    }
    drop = as_account(account)
    logs = Path(tempfile.mkdtemp(prefix="ty-svc-logs-"))
    try:
        prestart = [*drop, python, "-c", "from app.prestart import prestart; prestart()"]
        subprocess.run(prestart, env=env, check=True, cwd=folder)
        with slurm_cluster() as cluster:
            env = {"SLURM_CONF": cluster.env["SLURM_CONF"]} | env
            port = free_port()
            server = start_logged(
                [*drop, python, *server_argv("127.0.0.1", port)[1:]], env, logs / "server.log"
            )
            worker = start_logged([*drop, python, *worker_argv(2)[1:]], env, logs / "worker.log")
            try:
                base = f"http://127.0.0.1:{port}"
                wait_healthy(base, server, logs / "server.log")
                with LiveStack(base, logs, PASSWORD).admin_client() as api:
                    run = one_run(api)
            finally:
                stop_process(server)
                stop_process(worker)
                print((logs / "worker.log").read_text()[-4000:])
        banner = (logs / "worker.log").read_text()
        assert "job isolation: on" in banner, banner[:2000]
        assert "the worker's uid in a user namespace" in banner, banner[:2000]
        assert run["status"] == "succeeded", run
        run_dir = data / "runs" / str(run["id"])
        record = data / "slurm-jobs" / str(run["id"]) / "attempt-1.exit"
        assert record.read_text() == f"job={run['external_id']} exit=0\n"
        for path in (run_dir / "output.log", record):  # the job and its batch step: the account
            assert path.stat().st_uid == account.pw_uid, path
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)


def one_run(api: httpx.Client) -> dict:
    config = {
        "recipe": "tiny_mlp",
        "params": {"epochs": 1, "steps_per_epoch": 10},
        "resources": {"gpus": 0, "nproc": 1, "cpus": 1, "memory_gb": 1.0, "pool": "cluster"},
    }
    exp = api.post("/api/experiments", json={"name": "service-account", "config": config})
    assert exp.status_code == 201, exp.text
    run_id = api.post(f"/api/experiments/{exp.json()['id']}/runs", json={}).json()["id"]

    def ended() -> dict | None:
        run = dict(api.get(f"/api/runs/{run_id}").json())
        return run if run["status"] in ENDED else None

    return wait_for(ended, timeout=240, every=0.5, what=f"run {run_id} ended")
