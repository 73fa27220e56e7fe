"""Jobs run isolated from the server and from each other (worker/sandbox.py), on the real
stack: a member's hostile script finds none of the server's secrets, files or other runs and
cannot write the database; a daemon that detached every way it can dies with a cancel."""

from __future__ import annotations

import os
import secrets
import shutil
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN_PASSWORD, DATA_DIR, DATABASE_URL, WORKSPACE_DIR, wait_for_status
from tests.waits import wait_for

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parent / "workspace_scripts"
FINISHED = {"succeeded", "failed", "cancelled"}
DATABASE_FILE = DATA_DIR / "torchyard.db"


@pytest.fixture(scope="module")
def member(live_stack):
    """A member's API client (the admin adds the member through the API)."""
    username, password = f"member-{secrets.token_hex(3)}", secrets.token_urlsafe(12)
    with live_stack.admin_client() as admin:
        added = admin.post(
            "/api/users", json={"username": username, "password": password, "role": "member"}
        )
        assert added.status_code == 201, added.text
    login = httpx.post(
        f"{live_stack.base_url}/api/auth/token", data={"username": username, "password": password}
    )
    token = login.json()["access_token"]
    with live_stack.client({"Authorization": f"Bearer {token}"}) as client:
        yield client


def launch(api: httpx.Client, config: dict, name: str) -> dict:
    exp = api.post("/api/experiments", json={"name": name, "config": config})
    assert exp.status_code == 201, exp.text
    run = api.post(f"/api/experiments/{exp.json()['id']}/runs", json={})
    assert run.status_code == 201, run.text
    return dict(run.json())


def copy_script(name: str) -> str:
    target = WORKSPACE_DIR / "isolation"
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPTS / name, target / name)
    return f"isolation/{name}"


def tables() -> set[str]:
    with sqlite3.connect(DATABASE_FILE) as db:
        return {row[0] for row in db.execute("SELECT name FROM sqlite_master")}


def test_a_members_job_finds_nothing_of_the_server_or_other_runs(live_stack, member) -> None:
    with live_stack.admin_client() as admin:
        config = {"recipe": "tiny_mlp", "params": {"epochs": 1, "steps_per_epoch": 2}, "seed": 1}
        other = launch(admin, config, "the admin's run")
        assert wait_for_status(admin, other["id"], FINISHED)["status"] == "succeeded"
    other_dir = DATA_DIR / "runs" / str(other["id"])
    assert (other_dir / "output.log").exists()
    sqlite_mode = DATABASE_URL.startswith("sqlite")
    tables_before = tables() if sqlite_mode else set()
    data_files = [str(p) for p in DATA_DIR.iterdir() if p.is_file()]
    args = ["--database", str(DATABASE_FILE), "--data-dir", str(DATA_DIR)]
    args += ["--other-run", str(other_dir)]
    for path in data_files:
        args += ["--data-file", path]
    snoop = launch(member, {"script": copy_script("snoop.py"), "args": args}, "snoop")
    done = wait_for_status(member, snoop["id"], FINISHED)
    log = member.get(f"/api/runs/{snoop['id']}/logs").text
    assert done["status"] == "succeeded", (done["error"], log[-3000:])
    assert "snoop done" in log, log
    assert "LEAK" not in log, log
    assert ADMIN_PASSWORD not in log
    # It looked: the server's processes are not there to read, the files not there to open.
    pids = next(line for line in log.splitlines() if "visible pids" in line)
    assert all(int(p) < 100 for p in pids.split("[")[1].rstrip("]").split(", ")), pids
    assert f"read {DATABASE_FILE}: No such file or directory" in log
    assert "list other run: No such file or directory" in log
    # its own run's folder and its own user's cache (HF_HOME, worker/user_cache.py), no more
    assert "data dir lists ['caches', 'runs']" in log
    assert "write the database: unable to open database file" in log
    if sqlite_mode:
        assert tables() == tables_before and "pwned" not in tables_before
    # Its folder is its own: the run's uid when the worker is root.
    run_dir = DATA_DIR / "runs" / str(snoop["id"])
    assert run_dir.stat().st_mode & 0o777 == 0o700
    if os.geteuid() == 0:
        assert run_dir.stat().st_uid not in (0, other_dir.stat().st_uid)
    assert DATA_DIR.stat().st_mode & 0o777 == 0o700


def daemon_pids(marker: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
                state = Path(f"/proc/{entry.name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
            except OSError:
                continue
            if marker.encode() in cmdline and state not in (b"Z", b"X"):
                found.append(int(entry.name))
    return found


@pytest.mark.timed
def test_a_double_forked_setsid_clean_environment_daemon_is_gone_within_5s_of_cancel(
    live_stack,
    member,
) -> None:
    marker = f"daemon-{secrets.token_hex(6)}"
    config = {"script": copy_script("daemonize.py"), "args": ["--marker", marker]}
    run = launch(member, config, "daemon")
    try:
        _daemon_is_gone_within_5s_of_cancel(member, run, marker)
    finally:  # a failure above must not leave the run holding a worker slot for good
        member.post(f"/api/runs/{run['id']}/cancel")


def _daemon_is_gone_within_5s_of_cancel(member: httpx.Client, run: dict, marker: str) -> None:
    deadline = time.monotonic() + 60
    while not daemon_pids(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    (pid,) = daemon_pids(marker)
    # It escaped everything the old scan relied on: no job token in its environment, a
    # session whose leader (its parent) is gone already.
    assert b"TORCHYARD" not in Path(f"/proc/{pid}/environ").read_bytes()
    # (its session's leader exits, and is reaped by the job, a moment after the daemon's exec)
    assert os.getsid(pid) != pid
    wait_for(
        lambda: not Path(f"/proc/{os.getsid(pid)}").exists(),
        timeout=10,
        what=lambda: f"the session leader {os.getsid(pid)} of daemon {pid} is still there",
    )
    assert wait_for_status(member, run["id"], {"running"})["status"] == "running"
    cancelled = time.monotonic()
    assert member.post(f"/api/runs/{run['id']}/cancel").status_code == 202
    while daemon_pids(marker) and time.monotonic() - cancelled < 5:
        time.sleep(0.05)
    assert daemon_pids(marker) == [], f"daemon {pid} outlived the cancel"
    assert wait_for_status(member, run["id"], FINISHED, timeout=10)["status"] == "cancelled"
