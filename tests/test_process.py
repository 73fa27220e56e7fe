"""The job's first process: its CPU priority (settings.job_nice) and what it hands down."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from app.settings import Settings
from tests.waits import wait_for
from torchyard.contract import JOB_TOKEN_VAR
from worker.launcher import Launch
from worker.process import JobProcess, pids_with_token

# Prints its own niceness and that of a child it starts (torchrun's ranks are such children).
PROBE = (
    "import os, subprocess, sys; print('job', os.nice(0)); "
    "subprocess.run([sys.executable, '-c', 'import os; print(\"child\", os.nice(0))'])"
)


def run_probe(tmp_path: Path, nice: int) -> str:
    env = {**os.environ, JOB_TOKEN_VAR: f"nice-{nice}"}
    log_path = tmp_path / f"nice-{nice}.log"
    job = JobProcess(
        Launch(argv=[sys.executable, "-c", PROBE], env=env, cwd=tmp_path),
        log_path=log_path,
        cwd=tmp_path,
        token=f"nice-{nice}",
        nice=nice,
    )
    assert job.wait() == 0
    return log_path.read_text()


def test_jobs_run_at_the_configured_niceness_and_hand_it_down(tmp_path: Path) -> None:
    base = os.nice(0)
    expected = min(base + 7, 19)
    assert run_probe(tmp_path, 7).split() == ["job", str(expected), "child", str(expected)]
    assert run_probe(tmp_path, 0).split() == ["job", str(base), "child", str(base)]


@pytest.mark.skipif(
    not Path("/proc/self/autogroup").exists(), reason="the kernel has no autogroups"
)
def test_a_jobs_autogroup_is_as_nice_as_the_job(tmp_path: Path) -> None:
    """The keeper's session is a scheduling group of its own: the job's nice is the group's
    too, else it ranks the job only inside its group and the worker loses the CPU to it."""
    env = {**os.environ, JOB_TOKEN_VAR: "autogroup"}
    log_path = tmp_path / "autogroup.log"
    job = JobProcess(
        Launch(argv=["cat", "/proc/self/autogroup"], env=env, cwd=tmp_path),
        log_path=log_path,
        cwd=tmp_path,
        token="autogroup",
        nice=7,
    )
    assert job.wait() == 0
    assert log_path.read_text().split()[-2:] == ["nice", "7"]


def test_jobs_are_nicer_than_the_server_by_default() -> None:
    assert Settings().job_nice == 10


def test_an_error_inside_the_jobs_block_stops_every_process_of_it(tmp_path: Path) -> None:
    """The job and a child it started (as torchrun starts ranks, in a session of their own)."""
    token = "block-error"
    env = {**os.environ, JOB_TOKEN_VAR: token}
    spawn_child = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " start_new_session=True); time.sleep(60)"
    )
    job = JobProcess(
        Launch(argv=[sys.executable, "-c", spawn_child], env=env, cwd=tmp_path),
        log_path=tmp_path / "job.log",
        cwd=tmp_path,
        token=token,
        stop_grace_seconds=1.0,
    )
    # The keeper (worker.keeper), the job, and the child.
    wait_for(lambda: len(pids_with_token(token)) >= 3, timeout=10, what="the job's 3 processes")
    assert len(pids_with_token(token)) == 3
    with pytest.raises(RuntimeError, match="after the spawn"), job:
        raise RuntimeError("something after the spawn failed")
    assert pids_with_token(token) == [] and job.poll() is not None
