"""`torchyard up`: one command starts the server and a worker, Ctrl-C stops both."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.stack import REPO, free_port

pytestmark = pytest.mark.slow


def test_up_starts_server_and_worker_prints_url_and_stops_cleanly_on_ctrl_c(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.cli",
            "up",
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path / "data"),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        lines = []
        assert proc.stdout is not None
        while not any("Ctrl-C" in line for line in lines):
            line = proc.stdout.readline()
            assert line, f"torchyard up exited early: {lines}"
            lines.append(line)
        out = "".join(lines)
        assert f"http://127.0.0.1:{port}" in out
        # Says whether jobs are sandboxed (docs/security.md); the suite's machines have bwrap.
        assert "job isolation: on: jobs run in a bubblewrap sandbox" in out, out
        assert "generated password" in out  # no TORCHYARD_ADMIN_PASSWORD: printed once
        password = out.split("generated password: ")[1].split()[0]
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.post(
                    f"http://127.0.0.1:{port}/api/auth/token",
                    data={"username": "admin", "password": password},
                )
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert r.status_code == 200
        assert (tmp_path / "data" / "torchyard.db").exists()
        # The data dir and its files are the service's alone.
        assert (tmp_path / "data").stat().st_mode & 0o777 == 0o700
        for name in ("torchyard.db", "broker.db"):
            assert (tmp_path / "data" / name).stat().st_mode & 0o777 == 0o600, name
        children = _children(proc.pid)
        assert len(children) == 2  # uvicorn and the Celery worker
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert "torchyard stopped" in proc.stdout.read()
        assert not [pid for pid in children if _alive(pid)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def _children(pid: int) -> list[int]:
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True
    ).stdout
    return [int(x) for x in out.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
