"""worker/privileged_env.py: what a process torchyard starts as root gets, and the handoff of
a job's own environment. The real chain (keeper, network helper, bwrap, setpriv) is shown in
tests/hostile/test_root_never_sees_a_runs_env.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from torchyard.env_handoff import read_environment
from worker import privileged_env
from worker.launcher import Launch
from worker.privileged_env import HANDOFF_SCRIPT, for_build, handed_over, scratch


def test_a_helper_gets_an_environment_built_from_nothing() -> None:
    assert scratch() == {"PATH": privileged_env.SAFE_PATH, "LANG": "C.UTF-8"}


def test_a_build_gets_the_workers_pip_settings_and_nothing_else() -> None:
    worker = {
        "PATH": "/home/admin/bin:/usr/bin",
        "HOME": "/root",
        "PIP_INDEX_URL": "http://mirror/simple",
        "https_proxy": "http://proxy:3128",
        "LD_AUDIT": "/x.so",
        "PYTHONSTARTUP": "/x.py",
        "BASH_ENV": "/x.sh",
        "TORCHYARD_SECRET_KEY": "s",
    }
    assert for_build(worker) == {
        **scratch(),
        "HOME": "/root",
        "PIP_INDEX_URL": "http://mirror/simple",
        "https_proxy": "http://proxy:3128",
    }


def test_a_handed_over_launch_keeps_the_jobs_environment_for_the_job_alone() -> None:
    job_env = {"PATH": "/usr/bin", "LD_AUDIT": "/m.so", "TORCHYARD_JOB_TOKEN": "tok"}
    launch = handed_over(Launch(argv=["/py", "-m", "torchyard.job"], env=job_env, cwd=Path("/")))
    fd = launch.pass_fds[-1]
    try:
        assert launch.argv == [
            *(sys.executable, "-I", "-S", str(HANDOFF_SCRIPT), "--env-fd", str(fd), "--"),
            *("/py", "-m", "torchyard.job"),
        ]
        # Before the job: nothing of the run's, the token (the worker's own) to find its
        # processes by when it runs unsandboxed (worker.process).
        assert launch.env == {**scratch(), "TORCHYARD_JOB_TOKEN": "tok"}
        assert read_environment(fd) == job_env
    finally:
        os.close(fd)
