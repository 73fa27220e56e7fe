"""The job's entry point leaves a script's own setup alone and reports its failures as the
user would read them: the script's logging configuration is its own, a failure's traceback
starts at the script, and a finished job whose threads never end is ended, not left running.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from tests.test_recipes import job_launch


def run_script(
    tmp_path: Path, source: str, *, nproc: int = 1, env: dict[str, str] | None = None
) -> tuple[Path, subprocess.CompletedProcess]:
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    script = workspace / "train.py"
    script.write_text(textwrap.dedent(source))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    launch = job_launch(
        run_dir,
        {"script": "train.py", "resources": {"nproc": nproc, "gpus": 0}},
        script=script,
        extra_env=env,
    )
    result = subprocess.run(
        launch.argv, cwd=run_dir, env=launch.env, capture_output=True, text=True, timeout=300
    )
    return run_dir, result


def test_the_scripts_basicconfig_takes_effect_and_no_line_appears_twice(tmp_path: Path) -> None:
    _, result = run_script(
        tmp_path,
        """
        import logging
        logging.basicConfig(level=logging.DEBUG, format="%(levelname)s|%(name)s|%(message)s")
        logging.getLogger("user").debug("hello from debug")
        logging.getLogger("user").info("and from info")
        """,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("DEBUG|user|hello from debug") == 1, result.stderr
    assert result.stderr.count("INFO|user|and from info") == 1, result.stderr
    assert result.stderr.count("torchyard.job: run 1 finished") == 1  # ours still logged


def test_a_shape_bug_is_reported_from_the_script_not_from_torchyard(tmp_path: Path) -> None:
    run_dir, result = run_script(
        tmp_path,
        """
        import torch

        def forward(x):
            return torch.nn.Linear(4, 2)(x)

        forward(torch.zeros(3, 5))
        """,
    )
    assert result.returncode == 1
    record = json.loads((run_dir / "errors" / "rank0.json").read_text())
    assert record["message"].startswith("RuntimeError: mat1 and mat2 shapes cannot be multiplied")
    frames = [line for line in record["traceback"].splitlines() if line.startswith("  File ")]
    assert "train.py" in frames[0] and "<module>" in frames[0], frames
    assert not any("torchyard" in f or "runpy" in f for f in frames), frames
    assert record["traceback"] in result.stderr  # what the log shows is the same


@pytest.mark.slow
def test_a_failing_rank_records_its_own_error_under_ddp(tmp_path: Path) -> None:
    run_dir, result = run_script(
        tmp_path,
        """
        import os
        if os.environ["RANK"] == "1":
            raise ValueError("rank one cannot go on")
        """,
        nproc=2,
    )
    assert result.returncode != 0
    record = json.loads((run_dir / "errors" / "rank1.json").read_text())
    assert record["rank"] == 1 and record["message"] == "ValueError: rank one cannot go on"
    assert not (run_dir / "errors" / "rank0.json").exists()


def test_a_finished_job_whose_thread_never_ends_is_ended_and_says_why(tmp_path: Path) -> None:
    started = time.monotonic()
    _, result = run_script(
        tmp_path,
        """
        import threading, time
        threading.Thread(target=lambda: time.sleep(3600), name="forever").start()
        print("work done")
        """,
        env={"TORCHYARD_EXIT_GRACE_SECONDS": "2"},
    )
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 60
    assert "work done" in result.stdout
    assert "threads still running: forever" in result.stderr


@pytest.mark.slow
def test_each_ranks_stdout_and_stderr_lines_keep_their_order_under_torchrun(
    tmp_path: Path,
) -> None:
    log = tmp_path / "output.log"
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    script = workspace / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            for i in range(30):
                print(f"out {i}")
                print(f"err {i}", file=sys.stderr)
            """
        )
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    launch = job_launch(
        run_dir, {"script": "train.py", "resources": {"nproc": 2, "gpus": 0}}, script=script
    )
    with open(log, "wb") as out:  # as the worker captures a job: one file for both streams
        code = subprocess.run(
            launch.argv, cwd=run_dir, env=launch.env, stdout=out, stderr=subprocess.STDOUT
        ).returncode
    assert code == 0, log.read_text()
    lines = log.read_text().splitlines()
    expected = [f"{kind} {i}" for i in range(30) for kind in ("out", "err")]
    for rank in (0, 1):
        prefix = f"[rank{rank}]: "
        mine = [
            line[len(prefix) :]
            for line in lines
            if line.startswith(prefix) and line[len(prefix) :].split(" ")[0] in ("out", "err")
        ]
        assert mine == expected, mine
