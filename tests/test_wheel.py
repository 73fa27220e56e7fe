"""The wheel built from the repository installs and runs on its own, from any directory.

The wheel is the suite's one wheel of a used clone (tests/conftest.py `used_clone_wheel`: built
from a copy of the sources, so no stale build/ of the checkout leaks into it), installed with
its server extra into a fresh virtual environment that sees neither the checkout nor the test
venv's packages. Its base install (the client CLI and SDK alone) is tests/test_packaging.py's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from app.api_docs import OPENAPI_URL
from tests.stack import free_port

# The installed server always runs on its embedded defaults (the TORCHYARD_* settings of the
# test run are not passed on): the PostgreSQL + Redis pass leaves this module out
# (tests/conftest.py LOCAL_ONLY_MODULES).
pytestmark = pytest.mark.slow

ADMIN_PASSWORD = "wheel-admin-password"
TEST_TOOLS = {"pytest", "ruff", "mypy", "playwright", "schemathesis"}


def _run(argv: Sequence[str | Path], cwd: Path, timeout: float = 600) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"
    return done.stdout


# As the Makefile installs: CPU torch with pip (--no-compile: byte-compiling torch's files was
# most of its install), so that the machine's pip configuration (a local wheel, find-links)
# applies; then the wheel and its server extra with uv, which reads no pip configuration and
# finds torch installed (pip took 173 s for that step on the loaded box, uv 6 s, the same
# versions of every package). uv compiles their bytecode at install (+28 s): where
# PYTHONDONTWRITEBYTECODE is set (this box sets it), no import writes it, and each of
# `torchyard up`'s processes compiled fastapi, SQLAlchemy, Celery, ... from source at every
# start (`import app.main` 62 s against 4 s compiled, loaded box): up did not answer in 120 s.
UV = Path(sys.executable).parent / "uv"


def fresh_venv(path: Path) -> Path:
    """A venv without the system's (or the test venv's) site-packages; returns its python."""
    _run([sys.executable, "-m", "venv", path], cwd=path.parent, timeout=120)
    return path / "bin" / "python"


def installed(python: Path, cwd: Path) -> set[str]:
    out = _run(
        [
            python,
            "-c",
            "import importlib.metadata as m, json; "
            "print(json.dumps([d.metadata['Name'] for d in m.distributions()]))",
        ],
        cwd=cwd,
    )
    return {name.lower().replace("_", "-") for name in json.loads(out)}


@pytest.fixture
def server_up(
    used_clone_wheel: Path, tmp_path: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """CPU torch first (pip), then the wheel with its server extra (uv); `torchyard up`
    started from a directory outside the checkout, with nothing of the checkout on its path, in
    a folder whose own app/ and worker.py must not stand in for torchyard's. Its output (and
    its children's) goes to a file: a pipe nobody reads would block them once full."""
    python = fresh_venv(tmp_path / "venv")
    _run([python, "-m", "pip", "install", "-q", "--no-compile", "torch==2.13.0"], cwd=tmp_path)
    uv_install: list[str | Path] = [
        UV,
        "pip",
        "install",
        "-q",
        "--compile-bytecode",
        "--python",
        python,
    ]
    _run([*uv_install, f"{used_clone_wheel}[server]"], cwd=tmp_path)
    have = installed(python, tmp_path)
    assert {"fastapi", "celery", "torch"} <= have and not have & TEST_TOOLS, have & TEST_TOOLS

    # A user's project folder, with an app package and a worker.py of its own.
    cwd = tmp_path / "elsewhere"
    (cwd / "app").mkdir(parents=True)
    (cwd / "app" / "__init__.py").write_text("raise RuntimeError('the user app, not ours')\n")
    (cwd / "worker.py").write_text("raise RuntimeError('the user worker, not ours')\n")
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TORCHYARD_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env["TORCHYARD_ADMIN_PASSWORD"] = ADMIN_PASSWORD
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                python.parent / "torchyard",
                "up",
                "--port",
                str(port),
                "--data-dir",
                tmp_path / "data",
            ],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield f"http://127.0.0.1:{port}", proc, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _wait_until_serving(base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"torchyard up exited early:\n{log.read_text()}"
        try:
            if httpx.get(f"{base}/api/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError("the server did not answer within 120 s")


def test_the_wheel_with_its_server_extra_serves_every_page_and_trains(server_up) -> None:
    base, proc, log = server_up
    _wait_until_serving(base, proc, log)
    with httpx.Client(base_url=base, timeout=30) as http:
        login = http.get("/login")
        assert login.status_code == 200 and "<form" in login.text  # the templates are there
        for asset in ("/static/app.css", "/static/common.js", "/static/favicon.svg"):
            assert http.get(asset).status_code == 200, asset
        assert http.get(OPENAPI_URL).status_code == 200
        for page in ("/docs", "/redoc"):
            html = http.get(page)
            assert html.status_code == 200, page
            assert "https://" not in html.text and "http://" not in html.text
            assets = [u for u in _attr_urls(html.text) if u.startswith("/static/")]
            assert assets, html.text
            for url in assets:
                assert http.get(url).status_code == 200, url

        token = http.post("/api/auth/token", data={"username": "admin", "password": ADMIN_PASSWORD})
        assert token.status_code == 200, token.text
        http.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
        config = {"recipe": "tiny_mlp", "params": {"epochs": 1}}
        exp = http.post("/api/experiments", json={"name": "from the wheel", "config": config})
        assert exp.status_code == 201, exp.text
        run = http.post(f"/api/experiments/{exp.json()['id']}/runs")
        assert run.status_code == 201, run.text
        deadline = time.monotonic() + 180
        status = run.json()["status"]
        while status in ("queued", "running") and time.monotonic() < deadline:
            time.sleep(0.5)
            status = http.get(f"/api/runs/{run.json()['id']}").json()["status"]
        if status != "succeeded":
            run_id = run.json()["id"]
            error = http.get(f"/api/runs/{run_id}").json().get("error")
            tail = http.get(f"/api/runs/{run_id}/logs", params={"tail": 30}).text
            pytest.fail(f"run {run_id} {status}: {error!r}\nlog tail:\n{tail}")

    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0, log.read_text()
    assert "torchyard stopped" in log.read_text()


def _attr_urls(html: str) -> list[str]:
    """Every src="..." and href="..." of a page."""
    urls = []
    for attr in ('src="', 'href="'):
        for part in html.split(attr)[1:]:
            urls.append(part.split('"', 1)[0])
    return urls
