"""A run's own packages through a real server and a real (sandboxed) worker: a requirement the
worker lacks is installed into an environment layered on the worker's, which a second run
with the same requirements reuses in under a second; torch is the worker's, never a copy;
a requirement pip cannot satisfy fails the run with pip's own message."""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from tests.conftest import DATA_DIR, WORKSPACE_DIR, wait_for_status
from tests.test_cli import Cli, logged_in_cli
from tests.waits import wait_for

pytestmark = pytest.mark.slow

# Pure Python, on this machine's package index, not installed in the worker.
PACKAGE = "tomli-w==1.2.0"
ENV_DIR = DATA_DIR.with_name(f"{DATA_DIR.name}-envs")
FINISHED = {"succeeded", "failed", "cancelled"}
SCRIPT = textwrap.dedent(
    """
    import sys

    import tomli_w
    import torch

    print("tomli_w:", tomli_w.__file__)
    print("torch:", torch.__file__)
    print("python:", sys.prefix)
    print(tomli_w.dumps({"ok": 1}).strip())
    """
)

# Imports a module, then waits for a file to appear (its run holds its environment meanwhile).
WAITS = textwrap.dedent(
    """
    import importlib, os, sys, time

    importlib.import_module(sys.argv[1])
    print("imported", sys.argv[1], flush=True)
    deadline = time.time() + 120
    while not os.path.exists(sys.argv[2]) and time.time() < deadline:
        time.sleep(0.1)
    """
)


@pytest.fixture(scope="module")
def api(live_stack):
    with live_stack.admin_client() as client:
        yield client


@pytest.fixture(scope="module")
def script() -> str:
    folder = WORKSPACE_DIR / "envs"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "uses_tomli_w.py").write_text(SCRIPT)
    (folder / "waits.py").write_text(WAITS)
    return "envs/uses_tomli_w.py"


def launch(api: httpx.Client, config: dict) -> dict:
    exp = api.post("/api/experiments", json={"name": "env", "config": config})
    assert exp.status_code == 201, exp.text
    run = api.post(f"/api/experiments/{exp.json()['id']}/runs")
    assert run.status_code == 201, run.text
    return run.json()


def finished_log(api: httpx.Client, run_id: int) -> tuple[dict, str]:
    done = wait_for_status(api, run_id, FINISHED, timeout=300)
    return done, api.get(f"/api/runs/{run_id}/logs").text


def env_time(log: str) -> tuple[str, str, float]:
    found = re.search(r"torchyard: environment (\w+) (built|reused) in ([\d.]+) s", log)
    assert found, log
    return found[1], found[2], float(found[3])


def test_a_requirement_the_worker_lacks_is_installed_and_reused(api, script) -> None:
    config = {"script": script, "environment": {"requirements": [PACKAGE]}}
    first, log = finished_log(api, launch(api, config)["id"])
    assert first["status"] == "succeeded", (first, log)
    key, how, built_in = env_time(log)
    assert how == "built"
    assert "torchyard: pip: Successfully installed tomli-w-1.2.0" in log
    env = ENV_DIR / key
    assert f"tomli_w: {env}/lib/" in log
    assert "ok = 1" in log
    # torch is the worker's own (through the job base's link), and the environment holds no
    # copy of it
    torch_line = next(line for line in log.splitlines() if line.startswith("torch: "))
    torch_file = Path(torch_line.removeprefix("torch: "))
    assert torch_file.parts[: len(ENV_DIR.parts) + 1][-1].startswith("base-"), torch_line
    assert not torch_file.resolve().is_relative_to(ENV_DIR), torch_line
    assert not list(env.glob("lib/python*/site-packages/torch"))
    # a second run with the same requirements (spelled otherwise) reuses it, quickly
    config["environment"] = {"requirements": ["Tomli_W == 1.2.0"]}
    second, log = finished_log(api, launch(api, config)["id"])
    assert second["status"] == "succeeded", (second, log)
    again, how, reused_in = env_time(log)
    assert (again, how) == (key, "reused")
    assert reused_in < 1.0, log
    assert "torchyard: pip:" not in log
    print(f"environment built in {built_in:.2f} s, reused in {reused_in:.3f} s")


def test_every_rank_of_a_torchrun_job_imports_from_the_environment(api, script) -> None:
    config = {
        "script": script,
        "environment": {"requirements": [PACKAGE]},
        "resources": {"nproc": 2},
    }
    done, log = finished_log(api, launch(api, config)["id"])
    assert done["status"] == "succeeded", (done, log)
    key, _how, _seconds = env_time(log)
    for rank in (0, 1):
        assert f"[rank{rank}]: tomli_w: {ENV_DIR / key}/lib/" in log, log


def test_a_requirement_pip_cannot_satisfy_fails_the_run_with_its_message(api, script) -> None:
    """pip's ERROR lines come first in the run's error (its "Looking in" preamble dropped)."""
    missing = "torchyard-no-such-package-e2e==9.9.9"
    config = {"script": script, "environment": {"requirements": [missing]}}
    done, log = finished_log(api, launch(api, config)["id"])
    assert done["status"] == "failed"
    lines = done["error"].splitlines()
    assert lines[0].startswith("ERROR:"), done["error"]
    assert "No matching distribution found for torchyard-no-such-package-e2e" in done["error"]
    assert "pip exited with code 1 building the run's environment" in done["error"]
    assert not any(line.startswith("Looking in") for line in lines), done["error"]
    assert done["phase"] is None and done["training_started_at"] is None
    assert done["duration_seconds"] is None and done["env_build_seconds"] is not None
    assert "torchyard: environment: the build failed" in log
    # nothing half-built is left looking ready
    assert not list(ENV_DIR.glob(".build-*"))


def test_a_url_requirement_is_refused_before_anything_runs(api, script) -> None:
    config = {
        "script": script,
        "environment": {"requirements": ["six", "evil @ https://example.com/evil.whl"]},
    }
    r = api.post("/api/experiments", json={"name": "env", "config": config})
    assert r.status_code == 422
    detail = r.json()["detail"][0]
    assert detail["loc"][-3:] == ["environment", "requirements", 1]
    assert "URL or a local path" in detail["msg"]


@pytest.mark.timed
def test_the_build_streams_into_the_log_and_a_cancel_stops_it(api, script) -> None:
    """pip's lines reach the run's log while it works (the run heartbeats meanwhile), and a
    cancel during the build stops pip and ends the run cancelled, nothing half-built left."""
    config = {"script": script, "environment": {"requirements": ["termcolor"]}}
    run = launch(api, config)
    deadline = time.monotonic() + 120
    log = ""
    while time.monotonic() < deadline:
        log = api.get(f"/api/runs/{run['id']}/logs").text
        if "torchyard: pip: " in log:
            break
        time.sleep(0.1)
    assert "torchyard: pip: " in log, log
    assert api.get(f"/api/runs/{run['id']}").json()["status"] == "running"
    assert api.post(f"/api/runs/{run['id']}/cancel").status_code in (200, 202)
    done = wait_for_status(api, run["id"], FINISHED, timeout=10)
    assert done["status"] == "cancelled", done
    assert not list(ENV_DIR.glob(".build-*"))
    assert not list(ENV_DIR.glob("*/lib/python*/site-packages/termcolor"))
    assert not pips_installing("termcolor")


def pips_installing(name: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"pip" in argv and name.encode() in argv:
            found.append(int(entry.name))
    return found


def test_eviction_by_size_skips_an_environment_a_running_job_uses(api, script) -> None:
    """The live stack's cap is 1 byte: every new environment evicts the others nobody uses,
    least recently used first, but never one whose job is running."""
    flag = WORKSPACE_DIR / "envs" / "release-termcolor"
    flag.unlink(missing_ok=True)
    holder = launch(
        api,
        {
            "script": "envs/waits.py",
            "args": ["termcolor", str(flag)],
            "environment": {"requirements": ["termcolor"]},
        },
    )
    deadline = time.monotonic() + 120
    log = ""
    while "imported termcolor" not in log and time.monotonic() < deadline:
        log = api.get(f"/api/runs/{holder['id']}/logs").text
        time.sleep(0.2)
    held, _, _ = env_time(log)
    # another environment while the holder runs: over the cap, but the held one stays
    config = {"script": script, "environment": {"requirements": [PACKAGE]}}
    done, log = finished_log(api, launch(api, config)["id"])
    assert done["status"] == "succeeded", (done, log)
    other, _, _ = env_time(log)
    assert (ENV_DIR / held).is_dir() and (ENV_DIR / other).is_dir()
    flag.touch()
    assert wait_for_status(api, holder["id"], FINISHED, timeout=60)["status"] == "succeeded"
    # released: the next run's environment (the other, reused) evicts it
    done, log = finished_log(api, launch(api, config)["id"])
    assert env_time(log)[:2] == (other, "reused")
    assert not (ENV_DIR / held).exists()
    assert (ENV_DIR / other).is_dir()


def test_a_snapshots_requirements_txt_builds_the_runs_environment(api) -> None:
    """A requirements.txt at the root of the run's code snapshot (POST /api/code) is read by
    the worker, with the same checks as `environment.requirements`."""
    from tests.code_archives import tar_gz

    archive = tar_gz(
        [
            ("requirements.txt", "file", f"# the run's own packages\n{PACKAGE}\n".encode()),
            ("src/uses_tomli_w.py", "file", SCRIPT.encode()),
        ]
    )
    up = api.post("/api/code", files={"file": ("code.tar.gz", archive, "application/gzip")})
    assert up.status_code in (200, 201), up.text
    config = {"code": up.json()["digest"], "script": "src/uses_tomli_w.py"}
    done, log = finished_log(api, launch(api, config)["id"])
    assert done["status"] == "succeeded", (done, log)
    key, _how, _seconds = env_time(log)
    assert f"tomli_w: {ENV_DIR / key}/lib/" in log


# A package no other test of this module asks for: its environment is built here, not reused.
PHASE_PACKAGE = "appdirs==1.4.4"


def test_the_build_is_a_phase_of_its_own_in_the_api_and_submit_follow(
    api: httpx.Client, cli_here: Cli, tmp_path: Path
) -> None:
    """While pip works, the run is "building environment" with pip's last line (API and
    `submit --follow`); then it trains, and its duration counts from the job's start, the
    build's seconds apart."""
    name = f"env-phase-{secrets.token_hex(4)}"
    (tmp_path / "train.py").write_text("import appdirs\nprint('appdirs', appdirs.__version__)\n")
    (tmp_path / "spec.yaml").write_text(
        f"name: {name}\nconfig:\n  script: train.py\n"
        f"  environment:\n    requirements: ['{PHASE_PACKAGE}']\n"
    )
    follow = subprocess.Popen(
        [sys.executable, "-m", "torchyard.cli", "submit", "spec.yaml", "--follow"],
        cwd=tmp_path,
        env=cli_here.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        run_id = wait_for(lambda: _run_of(api, name), timeout=60, what=f"a run of {name}")
        building = wait_for(
            lambda: _building(api.get(f"/api/runs/{run_id}").json()),
            timeout=120,
            every=0.02,
            what=lambda: f"run {run_id} building with a pip line",
        )
        out, err = follow.communicate(timeout=300)
    finally:
        follow.kill()
    assert building["status"] == "running" and building["env_build_started_at"]
    assert follow.returncode == 0, (out, err)
    lines = err.splitlines()
    said = [line for line in lines if line.startswith(f"run {run_id}: building environment: ")]
    assert said, err
    assert lines.index(said[0]) < lines.index(f"run {run_id}: running"), err
    done = api.get(f"/api/runs/{run_id}").json()
    assert done["status"] == "succeeded" and done["phase"] is None
    started, finished = (_at(done[k]) for k in ("started_at", "finished_at"))
    built, trained = _at(done["env_build_started_at"]), _at(done["training_started_at"])
    assert started <= built < trained <= finished
    build = done["env_build_seconds"]
    assert build == pytest.approx((trained - built).total_seconds(), abs=1e-3)
    assert done["duration_seconds"] == pytest.approx((finished - trained).total_seconds(), abs=1e-3)
    whole = (finished - started).total_seconds()
    assert done["duration_seconds"] <= whole - build + 1e-3
    assert f"environment {build:.1f} s, training" in err, err
    print(
        f"pip line while building: {building['env_build_line']!r}; build {build:.2f} s, "
        f"training {done['duration_seconds']:.2f} s of {whole:.2f} s since start"
    )


@pytest.fixture(scope="module")
def cli_here(live_stack, tmp_path_factory):
    return logged_in_cli(live_stack, tmp_path_factory.mktemp("cli") / "cli.json")


def _run_of(api: httpx.Client, experiment: str) -> int | None:
    found = [e for e in api.get("/api/experiments").json() if e["name"] == experiment]
    if not found:
        return None
    runs = api.get("/api/runs", params={"experiment_id": found[0]["id"]}).json()["runs"]
    return runs[0]["id"] if runs else None


def _building(run: dict) -> dict | None:
    """The run while its phase says the build, with a line of pip's."""
    building = run["phase"] == "building environment" and run["env_build_line"]
    return run if building else None


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value)


# What a job's Python sees (issue 28 point 8), and the user's shared caches (issue 29 point 5).
PROBE = textwrap.dedent(
    """
    import os, sys

    try:
        import sqlalchemy
        print("sqlalchemy:", sqlalchemy.__version__)
    except ImportError:
        print("sqlalchemy: missing")
    import numpy, tensorboard, torch, torchyard  # what every job has
    hf = os.environ["HF_HOME"]
    print("hf_home:", hf, os.environ["TORCH_HOME"])
    mark = os.path.join(hf, "mark.txt")
    print("seen:", open(mark).read() if os.path.exists(mark) else "nothing")
    if len(sys.argv) > 1:
        with open(mark, "w") as f:
            f.write(sys.argv[1])
    """
)


@pytest.fixture(scope="module")
def member(live_stack):
    """Another user's API client (added by the admin through the API)."""
    import secrets

    username, password = f"member-{secrets.token_hex(3)}", secrets.token_urlsafe(12)
    with live_stack.admin_client() as admin:
        added = admin.post(
            "/api/users", json={"username": username, "password": password, "role": "member"}
        )
        assert added.status_code == 201, added.text
    login = httpx.post(
        f"{live_stack.base_url}/api/auth/token", data={"username": username, "password": password}
    )
    with live_stack.client({"Authorization": f"Bearer {login.json()['access_token']}"}) as c:
        yield c


def probe(api: httpx.Client, *args: str, requirements: list[str] | None = None) -> str:
    folder = WORKSPACE_DIR / "envs"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "probe.py").write_text(PROBE)
    config: dict = {"script": "envs/probe.py", "args": list(args)}
    if requirements:
        config["environment"] = {"requirements": requirements}
    run = launch(api, config)
    done, log = finished_log(api, run["id"])
    assert done["status"] == "succeeded", log
    return log


def test_a_job_sees_no_server_package_unless_its_run_asks(api: httpx.Client) -> None:
    assert "sqlalchemy: missing" in probe(api)
    log = probe(api, requirements=["sqlalchemy"])
    assert re.search(r"sqlalchemy: \d", log), log


def test_one_users_runs_share_hf_home_and_no_other_user_sees_it(
    api: httpx.Client, member: httpx.Client
) -> None:
    first = probe(api, "written by the first run")
    home = re.search(r"hf_home: (\S+) (\S+)", first)
    assert home and home[1] != home[2], first
    assert DATA_DIR.resolve() in Path(home[1]).parents  # the data dir: hidden from other jobs
    second = probe(api)
    assert "seen: written by the first run" in second
    assert f"hf_home: {home[1]} " in second
    other = probe(member)
    assert "seen: nothing" in other and f"hf_home: {home[1]} " not in other
