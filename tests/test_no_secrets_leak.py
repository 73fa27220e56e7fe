"""No password, token or server secret reaches a log, a run's output, or a job's environment:
the real server and worker (live stack), a real tiny_mlp run, and /proc/<pid>/environ."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import (
    ADMIN_PASSWORD,
    BROKER_URL,
    DATA_DIR,
    DATABASE_URL,
    pids_of_run,
    wait_for_status,
)

pytestmark = pytest.mark.slow

SETTINGS_IN_ENV = (
    b"TORCHYARD_ADMIN_PASSWORD",
    b"TORCHYARD_DATABASE_URL",
    b"TORCHYARD_SECRET_KEY",
    b"TORCHYARD_BROKER_URL",
)


def _environ_of_job(run_id: int, timeout: float = 60) -> list[bytes]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in pids_of_run(run_id):  # the job's own processes, past its keeper
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(v.startswith(b"TORCHYARD_RUN_DIR=") for v in environ):
                return environ
        time.sleep(0.05)
    raise AssertionError(f"no process of run {run_id} seen within {timeout}s")


def test_no_password_or_token_in_logs_output_or_job_environment(live_stack) -> None:
    login = httpx.post(
        f"{live_stack.base_url}/api/auth/token",
        data={"username": "admin", "password": ADMIN_PASSWORD},
    )
    assert login.status_code == 200
    session_token = login.json()["access_token"]
    # a failed login too: its password must not be logged either
    wrong = "wrong-" + ADMIN_PASSWORD[::-1]
    httpx.post(
        f"{live_stack.base_url}/api/auth/token", data={"username": "admin", "password": wrong}
    )
    with live_stack.client({"Authorization": f"Bearer {session_token}"}) as api:
        created = api.post("/api/tokens", json={"name": "leak-test"})
        assert created.status_code == 201
        named_token = created.json()["access_token"]
        config = {
            "recipe": "tiny_mlp",
            "params": {"epochs": 1, "steps_per_epoch": 20, "step_sleep": 0.1},
            "seed": 5,
        }
        exp = api.post("/api/experiments", json={"name": "leaks", "config": config}).json()
        run = api.post(f"/api/experiments/{exp['id']}/runs", json={}).json()

        environ = _environ_of_job(run["id"])
        assert any(v.startswith(b"TORCHYARD_RUN_DIR=") for v in environ)  # it is the job
        names = {v.split(b"=", 1)[0] for v in environ}
        for name in SETTINGS_IN_ENV:
            assert name not in names, name
        joined = b"\0".join(environ)
        for value in (ADMIN_PASSWORD, DATABASE_URL, BROKER_URL, session_token, named_token):
            assert value.encode() not in joined

        done = wait_for_status(api, run["id"], {"succeeded", "failed"})
        assert done["status"] == "succeeded", done
        api.get(f"/api/runs/{run['id']}/logs")

    secrets_ = (ADMIN_PASSWORD, wrong, session_token, named_token)
    output = DATA_DIR / "runs" / str(run["id"]) / "output.log"
    for path in (live_stack.log_dir / "server.log", live_stack.log_dir / "worker.log", output):
        text = path.read_text(errors="replace")
        assert text or path != output, f"{path} is empty"
        for value in secrets_:
            assert value not in text, f"a secret is in {path}"
