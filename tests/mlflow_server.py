"""The torchyard app served by uvicorn in a thread on a free port, for clients that speak HTTP
themselves (the real ``mlflow`` client): the same database as the test session's."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import mlflow
import pytest
import uvicorn
from mlflow.tracking import MlflowClient

from tests.conftest import make_user
from tests.stack import free_port
from tests.waits import wait_for


@contextmanager
def serving(app: Any) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    wait_for(
        lambda: server.started or not thread.is_alive(), timeout=60, what="the test server's start"
    )
    if not server.started:
        raise RuntimeError("the test server did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def mlflow_member(server: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A new member whose token the MLflow client sends (MLFLOW_TRACKING_TOKEN), the client
    pointed at ``server`` with no retries; the member's headers, for plain HTTP."""
    _name, _password, headers = make_user()
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", headers["Authorization"].split()[1])
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    mlflow.set_tracking_uri(server)
    return headers


# A real MLflow tracking server (`make mlflow-server` builds its venv: the full mlflow package
# beside, not in, the test venv), for what torchyard reads from MLflow (`torchyard import`).
MLFLOW_VENV = Path(__file__).resolve().parent.parent / ".venv-mlflow"


@contextmanager
def real_mlflow_server(folder: Path) -> Iterator[str]:
    """``mlflow server`` with a SQLite store and served artifacts under ``folder``."""
    executable = MLFLOW_VENV / "bin" / "mlflow"
    if not executable.exists():
        pytest.fail(f"no MLflow server at {executable}: run `make mlflow-server`")
    port = free_port()
    argv = [
        str(executable), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
        "--artifacts-destination", str(folder / "artifacts"), "--serve-artifacts",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    log = folder / "mlflow-server.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            argv, cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:

        def healthy() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"mlflow server exited: {log.read_text()[-2000:]}")
            try:
                return httpx.get(f"{url}/health", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(healthy, timeout=300, what="the MLflow server's start", every=0.3)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module", name="server")
def torchyard_server(app: Any) -> Iterator[str]:
    """The test session's torchyard app on a port (import it into a test module)."""
    with serving(app) as url:
        yield url


@pytest.fixture(name="token")
def importer_token(monkeypatch: pytest.MonkeyPatch) -> str:
    """A new member's token: what `torchyard import --token` sends, and what the MLflow client
    reading torchyard back sends (MLFLOW_TRACKING_TOKEN)."""
    _name, _password, headers = make_user()
    value = headers["Authorization"].split()[1]
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", value)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    return value


def imported_runs(server: str, experiment: str, run_id_tag: str) -> dict[str, Any]:
    """The runs of torchyard's experiment by their source run id (the tag ``run_id_tag``),
    read with MLflow's own client."""
    client = MlflowClient(tracking_uri=server)
    found = client.get_experiment_by_name(experiment)
    assert found is not None
    runs = client.search_runs([found.experiment_id], max_results=1000)
    return {run.data.tags[run_id_tag]: run for run in runs}
