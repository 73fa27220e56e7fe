"""A script's output and errors through a real worker, as the user reads them in the log API:
its own ``logging.basicConfig`` takes effect with each line once; each rank's stdout and
stderr lines keep their order under nproc 2; a failed run's error starts with the user's
exception line, for a rank that raises under nproc 2 (not torchrun's ChildFailedError) and
for a shape bug in a single process (not torchyard's or runpy's frames)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import torchyard
from tests.conftest import DATA_DIR, WORKSPACE_DIR, wait_for_status

pytestmark = pytest.mark.slow

SCRIPTS = {
    "rank1_raises.py": """
        import os
        import torch.distributed as dist

        dist.init_process_group("gloo")
        dist.barrier()
        if dist.get_rank() == 1:
            raise ValueError("rank one cannot go on")
        dist.barrier()
    """,
    "basic_config.py": """
        import logging

        logging.basicConfig(level=logging.DEBUG, format="%(levelname)s|%(name)s|%(message)s")
        logging.getLogger("user").debug("hello from debug")
    """,
    "alternating.py": """
        import sys

        for i in range(20):
            print(f"out {i}")
            print(f"err {i}", file=sys.stderr)
    """,
    "shape_bug.py": """
        import torch

        model = torch.nn.Linear(4, 2)
        model(torch.zeros(3, 5))
    """,
    "missing_file.py": """
        import os

        open(os.path.abspath("missing.csv"))
    """,
}
FINISHED = {"succeeded", "failed", "cancelled"}


def run_script(api, name: str, nproc: int) -> dict:
    folder = WORKSPACE_DIR / "errors"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(textwrap.dedent(SCRIPTS[name]))
    config = {"script": f"errors/{name}", "resources": {"nproc": nproc}}
    exp = api.post("/api/experiments", json={"name": name, "config": config})
    assert exp.status_code == 201, exp.text
    run = api.post(f"/api/experiments/{exp.json()['id']}/runs").json()
    return wait_for_status(api, run["id"], FINISHED, timeout=180)


def test_a_rank_that_raises_is_the_runs_error(live_stack) -> None:
    with live_stack.admin_client() as api:
        done = run_script(api, "rank1_raises.py", nproc=2)
    assert done["status"] == "failed"
    assert done["error"].startswith("ValueError: rank one cannot go on"), done["error"]
    assert "rank1_raises.py" in done["error"] and "ChildFailedError" not in done["error"]


def test_a_shape_bug_is_the_runs_error_from_the_scripts_frame(live_stack) -> None:
    with live_stack.admin_client() as api:
        done = run_script(api, "shape_bug.py", nproc=1)
    assert done["status"] == "failed"
    error = done["error"]
    assert error.startswith("RuntimeError: mat1 and mat2 shapes cannot be multiplied"), error
    frames = [line for line in error.splitlines() if line.strip().startswith("File ")]
    assert "shape_bug.py" in frames[0], frames
    package = str(Path(torchyard.__file__).parent)
    assert not any(package in f or "runpy" in f for f in frames), frames


def test_the_scripts_logging_setup_is_its_own(live_stack) -> None:
    with live_stack.admin_client() as api:
        done = run_script(api, "basic_config.py", nproc=1)
        log = api.get(f"/api/runs/{done['id']}/logs").text
    assert done["status"] == "succeeded", log[-2000:]
    assert log.count("DEBUG|user|hello from debug") == 1, log


def test_each_ranks_stdout_and_stderr_keep_their_order(live_stack) -> None:
    with live_stack.admin_client() as api:
        done = run_script(api, "alternating.py", nproc=2)
        assert done["status"] == "succeeded"
        expected = [f"{kind} {i}" for i in range(20) for kind in ("out", "err")]
        for rank in (0, 1):
            text = api.get(f"/api/runs/{done['id']}/logs", params={"rank": rank}).text
            mine = [
                line.split(": ", 1)[1]
                for line in text.splitlines()
                if line.split(": ", 1)[-1].split(" ")[0] in ("out", "err")
            ]
            assert mine == expected, (rank, mine)


def test_a_failed_runs_log_error_and_record_name_no_path_of_the_host(live_stack) -> None:
    """Issue 37: every job's log printed its script's absolute path, and the error's traceback
    the data dir's: where the snapshots and every run live on the host. A member sees
    run-relative paths, the workspace's as workspace/..., the rest of the data dir as <data>."""
    with live_stack.admin_client() as api:
        done = run_script(api, "missing_file.py", nproc=1)
        log = api.get(f"/api/runs/{done['id']}/logs").text
        record = api.get(f"/api/runs/{done['id']}/environment").json()
    assert done["status"] == "failed"
    error = done["error"]
    assert error.startswith(
        "FileNotFoundError: [Errno 2] No such file or directory: 'work/missing.csv'"
    )
    assert 'File "workspace/errors/missing_file.py", line 4' in error, error
    for shown in (log, error, str(record)):
        for host_path in (DATA_DIR, DATA_DIR.parent / "data-envs", WORKSPACE_DIR):
            assert f"{host_path}/" not in shown, (host_path, shown)
    assert "script errors/missing_file.py" in log, log
    assert record["script"] == "errors/missing_file.py"
    assert record["python_executable"].endswith("/bin/python"), record
