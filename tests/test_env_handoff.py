"""torchyard/env_handoff.py: the job's first process takes its environment from a memfd and
execs the job with exactly that, whatever the environment it was itself started with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from torchyard import env_handoff
from worker.privileged_env import HANDOFF_SCRIPT, env_fd

SHOW_ENV = "import json, os; print(json.dumps(dict(os.environ)))"


def handoff(fd_arg: str, *command: str, env: dict[str, str], fds: tuple[int, ...] = ()):
    return subprocess.run(
        [sys.executable, "-I", "-S", str(HANDOFF_SCRIPT), "--env-fd", fd_arg, "--", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        pass_fds=fds,
        check=False,
    )


def test_the_job_starts_with_exactly_the_handed_environment() -> None:
    job_env = {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",  # no locale coercion adding LC_CTYPE in the job's python
        "TORCHYARD_CONFIG": json.dumps({"params": {"a": "b=c"}}),
        "EMPTY": "",
        "UNICODE": "héllo",
    }
    fd = env_fd(job_env)
    try:
        done = handoff(str(fd), sys.executable, "-c", SHOW_ENV, env={"ROOTS_OWN": "1"}, fds=(fd,))
    finally:
        os.close(fd)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == job_env


def test_the_command_is_found_on_the_jobs_path(tmp_path: Path) -> None:
    (tmp_path / "tool").write_text("#!/bin/sh\necho found $MARK\n")
    (tmp_path / "tool").chmod(0o755)
    fd = env_fd({"PATH": f"{tmp_path}:/usr/bin:/bin", "MARK": "it"})
    try:
        done = handoff(str(fd), "tool", env={"PATH": "/usr/bin:/bin"}, fds=(fd,))
    finally:
        os.close(fd)
    assert (done.returncode, done.stdout) == (0, "found it\n"), done.stderr


def test_no_environment_to_read_fails_the_job_with_the_reason() -> None:
    done = handoff("97", "true", env={})
    assert done.returncode == env_handoff.BAD_USAGE
    assert "could not read the job's environment" in done.stderr


def test_a_job_that_cannot_start_says_which() -> None:
    fd = env_fd({"PATH": "/nonexistent"})
    try:
        done = handoff(str(fd), "no-such-program", env={}, fds=(fd,))
    finally:
        os.close(fd)
    assert done.returncode == env_handoff.CANNOT_START
    assert "could not start the job (no-such-program)" in done.stderr


def test_a_malformed_command_line_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(HANDOFF_SCRIPT), "true"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == env_handoff.BAD_USAGE and "usage" in done.stderr


def test_entries_are_read_as_proc_environ_holds_them() -> None:
    fd = env_fd({"A": "1", "B": "x=y"})
    try:
        os.write(fd, b"no-equals-sign\0\0")  # ignored, as the kernel's own format allows
        assert env_handoff.read_environment(fd) == {"A": "1", "B": "x=y"}
    finally:
        os.close(fd)
