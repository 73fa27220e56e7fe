"""`torchyard up`: one command starts the server and a worker, Ctrl-C stops both; a child that
dies is started again while the other keeps serving (torchyard/compose/supervisor.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from tests.conftest import wait_for_status
from tests.stack import REPO, free_port
from tests.waits import wait_for

# The admin's password once the printed one is changed (it must be, before anything else).
OWN = "the admin's own password"

pytestmark = pytest.mark.slow


def test_up_starts_server_and_worker_prints_url_and_stops_cleanly_on_ctrl_c(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")}
    env["TORCHYARD_PORT"] = str(port)  # the port from the environment (`make up PORT=...`)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torchyard.cli",
            "up",
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
        lines: list[str] = []
        assert proc.stdout is not None
        # Up to its own last line and the worker's start banner (the worker says it).
        while not (
            any("Ctrl-C" in line for line in lines)
            and any("job network" in line for line in lines)  # after "job isolation"
        ):
            line = proc.stdout.readline()
            assert line, f"torchyard up exited early: {lines}"
            lines.append(line)
        out = "".join(lines)
        assert f"http://127.0.0.1:{port}" in out
        # Says whether jobs are sandboxed (docs/security.md); the suite's machines have bwrap.
        assert "job isolation: on: jobs run in a bubblewrap sandbox" in out, out
        assert "job network: egress" in out, out  # and what jobs reach (worker/job_network.py)
        assert "job limits: " in out, out  # and how it holds them (worker/limits.py)
        assert "worker on " in out and "GPUs " in out, out
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
        # The printed password lets the admin in, to change it before anything else.
        admin = {"Authorization": f"Bearer {r.json()['access_token']}"}
        base = f"http://127.0.0.1:{port}"
        refused = httpx.get(f"{base}/api/experiments", headers=admin)
        assert refused.status_code == 403 and "must be changed" in refused.json()["detail"]
        change = {"current_password": password, "new_password": OWN}
        assert httpx.post(f"{base}/api/users/me/password", json=change, headers=admin).is_success
        assert httpx.get(f"{base}/api/experiments", headers=admin).status_code == 200
        assert (tmp_path / "data" / "torchyard.db").exists()
        # The data dir and its files are the service's alone.
        assert (tmp_path / "data").stat().st_mode & 0o777 == 0o700
        for name in ("torchyard.db", "broker.db"):
            assert (tmp_path / "data" / name).stat().st_mode & 0o777 == 0o600, name
        # uvicorn, the worker and, SPARE_AFTER_SECONDS after uvicorn, its spare
        # (torchyard/compose/standby.py): on a quiet box the login above answers before the
        # spare starts.
        deadline = time.monotonic() + 60
        while len(children := _children(proc.pid)) < 3:
            assert time.monotonic() < deadline, children
            time.sleep(0.2)
        assert len(children) == 3, children
        # The preparation's imports (settings, schema, queue: pydantic, SQLAlchemy, Alembic,
        # kombu) are gone from the supervisor, which became a process of the standard library
        # (torchyard/compose/supervising.py): it held 93 MiB of an idle `up`'s 382.
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        assert "_pydantic_core" not in maps, "the supervisor still holds the app's imports"
        pss_kib = int(
            Path(f"/proc/{proc.pid}/smaps_rollup").read_text().split("Pss:")[1].split()[0]
        )
        assert pss_kib < 40 * 1024, f"the supervisor's PSS is {pss_kib} KiB"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert "torchyard stopped" in proc.stdout.read()
        assert not [pid for pid in children if _alive(pid)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
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


def _start_up(tmp_path: Path, port: int) -> tuple[subprocess.Popen[str], str]:
    """`torchyard up` in a fresh data dir; returns it once it says "Ctrl-C", and the password."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "torchyard.cli", "up", "--port", str(port)]
        + ["--data-dir", str(tmp_path / "data")],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    assert proc.stdout is not None
    while not any("Ctrl-C" in line for line in lines):
        line = proc.stdout.readline()
        assert line, f"torchyard up exited early: {lines}"
        lines.append(line)
    out = "".join(lines)
    return proc, out.split("generated password: ")[1].split()[0] if "password: " in out else ""


def _token(base: str, password: str, deadline: float) -> str:
    """The admin's token; the generated password changed to OWN first where it must be."""
    while True:
        try:
            r = httpx.post(
                f"{base}/api/auth/token", data={"username": "admin", "password": password}
            )
            token = str(r.json()["access_token"])
            break
        except httpx.HTTPError:
            assert time.monotonic() < deadline, "the server never answered"
            time.sleep(0.2)
    headers = {"Authorization": f"Bearer {token}"}
    if httpx.get(f"{base}/api/users/me", headers=headers).json()["must_change_password"]:
        change = {"current_password": password, "new_password": OWN}
        r = httpx.post(f"{base}/api/users/me/password", json=change, headers=headers)
        assert r.status_code == 204, r.text
    return token


def _health(base: str) -> bool:
    try:
        return httpx.get(f"{base}/api/health").status_code == 200
    except httpx.HTTPError:
        return False


def _worker_pid(up_pid: int) -> int:
    """`python -P -m worker worker ...` among the children of `up`."""
    return next(p for p in _children(up_pid) if b"\0worker\0" in _cmdline(p))


def test_a_killed_worker_is_started_again_and_the_ui_answers_throughout(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc, password = _start_up(tmp_path, port)
    try:
        token = _token(base, password, time.monotonic() + 60)
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as api:
            # A run in training when the worker is killed: the next worker re-adopts it.
            training = _submit_and_wait_for_points(api, epochs=4)
            old = _worker_pid(proc.pid)
            os.kill(old, signal.SIGKILL)
            killed_at = time.monotonic()
            # The web UI keeps answering while the worker is down and comes back.
            new = None
            while new is None:
                assert api.get("/api/health").status_code == 200
                assert time.monotonic() - killed_at < 10, "no new worker within 10 s"
                workers = [
                    p for p in _children(proc.pid) if p != old and b"\0worker\0" in _cmdline(p)
                ]
                new = workers[0] if workers else None
                time.sleep(0.2)
            # ... and is up within 10 s: it heartbeats (the scheduler, and a queued run's
            # reason, see a live worker again), the UI answering all the while.
            killed_wall = time.time()
            while not _heartbeat_after(api, killed_wall - (time.monotonic() - killed_at)):
                assert api.get("/api/health").status_code == 200
                assert time.monotonic() - killed_at < 10, "the new worker not up within 10 s"
                time.sleep(0.2)
            _assert_trained_on_as_attempt_1(api, training, steps=4 * 40)
            # The new worker runs jobs.
            experiment = api.post(
                "/api/experiments",
                json={"name": "after", "config": {"recipe": "tiny_mlp", "params": {"epochs": 1}}},
            ).json()
            run = api.post(f"/api/experiments/{experiment['id']}/runs").json()
            assert wait_for_status(api, run["id"], {"succeeded", "failed"})["status"] == "succeeded"
            # A killed server is started again too.
            server = serving_pid(proc.pid, port)
            os.kill(server, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while True:
                try:
                    if httpx.get(f"{base}/api/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "the server was not started again"
                time.sleep(0.2)
            # An upgrade's SIGTERM of the server, with streams open: tests/test_standby.py.
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=90) == 0
        assert proc.stdout is not None
        out = proc.stdout.read()
        assert "the worker (pid" in out and "was killed by SIGKILL" in out, out
        assert "the server (pid" in out and "torchyard stopped" in out, out
    finally:
        _end(proc)


def serving_pid(up_pid: int, port: int) -> int:
    """The child of `up` that listens on the port: the server. Its spare
    (torchyard/compose/standby.py) has the same arguments but listens only once told to serve."""

    def listening() -> int | None:
        inodes = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
        for pid in _children(up_pid):
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
                links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in fds}
            except OSError:
                continue
            if links & inodes:
                return pid
        return None

    return wait_for(listening, timeout=60, what=f"a child of `up` listening on {port}")


def _heartbeat_after(api: httpx.Client, since: float) -> bool:
    """Whether a worker host heartbeated after `since` (a time.time()): GET /api/gpus."""
    hosts = api.get("/api/gpus").json()["hosts"]
    return any(datetime.fromisoformat(h["heartbeat_at"]).timestamp() > since for h in hosts)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_ctrl_c_and_up_again_mid_run_the_run_trains_on_as_attempt_1(tmp_path: Path) -> None:
    """An upgrade or a config change: Ctrl-C, then `torchyard up` again. The job trains on
    meanwhile (worker.keeper), the new worker re-adopts it (worker.adoption): the run ends
    succeeded on attempt 1, its curve continuous with no point twice, never failed."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc, password = _start_up(tmp_path, port)
    try:
        token = _token(base, password, time.monotonic() + 60)
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=base, headers=headers, timeout=30) as api:
            run_id = _submit_and_wait_for_points(api, epochs=4)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=90) == 0
        assert proc.stdout is not None
        out = proc.stdout.read()
        proc.stdout.close()
        # Its last lines say which job trains on and how to stop it (issue 41), and its start
        # said our line about root, not Celery's superuser warning.
        assert f"1 job trains on without torchyard: run {run_id} " in out, out
        assert f"`torchyard cancel {run_id}`" in out, out
        assert "superuser privileges" not in out, out
        if os.geteuid() == 0:
            assert "worker runs as root: only to set up each job's sandbox" in out, out
        # The job trains on with no torchyard running; its record names it for the next worker.
        assert (tmp_path / "data" / "jobs" / f"{run_id}.json").exists()

        proc, _ = _start_up(tmp_path, port)
        with httpx.Client(base_url=base, headers=headers, timeout=30) as api:
            _token(base, OWN, time.monotonic() + 60)  # the server answers again
            _assert_trained_on_as_attempt_1(api, run_id, steps=4 * 40)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=90) == 0
    finally:
        _end(proc)


def _submit_and_wait_for_points(api: httpx.Client, *, epochs: int) -> int:
    config = {
        "recipe": "tiny_mlp",
        "params": {"epochs": epochs, "steps_per_epoch": 40, "step_sleep": 0.06},
    }
    experiment = api.post("/api/experiments", json={"name": "up", "config": config})
    run_id = int(api.post(f"/api/experiments/{experiment.json()['id']}/runs").json()["id"])
    deadline = time.monotonic() + 90
    while not api.get(f"/api/runs/{run_id}/metrics").json()["series"].get("train/loss"):
        assert time.monotonic() < deadline, "the run never reported"
        time.sleep(0.2)
    return run_id


def _assert_trained_on_as_attempt_1(api: httpx.Client, run_id: int, *, steps: int) -> None:
    """Never anything but running as attempt 1 until it succeeds, its curve continuous."""
    seen = set()
    deadline = time.monotonic() + 120
    while (run := api.get(f"/api/runs/{run_id}").json())["status"] not in (
        "succeeded",
        "failed",
        "cancelled",
    ):
        seen.add((run["status"], run["attempt"]))
        assert time.monotonic() < deadline, run
        time.sleep(0.2)
    assert run["status"] == "succeeded" and run["attempt"] == 1, run
    assert seen <= {("running", 1)}, seen
    series = api.get(f"/api/runs/{run_id}/metrics").json()["series"]
    assert series["train/loss"]["step"] == list(range(1, steps + 1))


def _end(proc: subprocess.Popen[str]) -> None:
    """Whatever the test did: `up` is gone and its pipe closed."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
