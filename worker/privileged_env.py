"""The environment of every process torchyard starts before a job, and the handoff of the
job's own.

The worker runs as root on a team's box, and the processes between it and a job run as root
too: the keeper (worker.keeper), the network helper (worker.job_network) with slirp4netns,
nsenter and ip, bwrap and setpriv, nft for a multi-node run's rules, pip for a run's
environment. A run's ``env`` is a member's data, and a deny-list of dangerous names cannot keep
up with the loader, glibc, Python and pip (LD_AUDIT, GCONV_PATH, PYTHONSTARTUP, BASH_ENV,
PIP_CONFIG_FILE, ...: issue 37). So the rule is an allow-list at the privilege line:

- a privileged process gets `scratch()`: PATH and a locale, built here from nothing (a pip
  build adds the worker's own index and proxy settings, `for_build`, never a run's);
- the job's own environment (the launcher's variables, the run's ``env``, the sandbox's HOME)
  goes into a memfd that `handed_over` puts in front of the job: torchyard/env_handoff.py
  reads it as the job's first process, after setpriv dropped to the run's uid, and execs the
  job with it. Argv carries only the descriptor's number.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from torchyard import env_handoff
from torchyard.contract import JOB_TOKEN_VAR

if TYPE_CHECKING:  # standard library only at run time: worker.job_network's helper imports this
    from worker.launcher import Launch

SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HANDOFF_SCRIPT = Path(env_handoff.__file__).resolve()
# What a run's environment build takes of the worker's own environment: the admin's index,
# proxy and certificate settings and pip's cache home (the worker's, set by whoever started it).
BUILD_VARIABLE_PREFIXES = ("PIP_", "UV_")
BUILD_VARIABLES = (
    "HOME",
    "TMPDIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
)


def scratch() -> dict[str, str]:
    """The whole environment of a privileged helper: nothing inherited."""
    return {"PATH": SAFE_PATH, "LANG": "C.UTF-8"}


def for_build(worker_environ: Mapping[str, str]) -> dict[str, str]:
    """pip's environment for a run's build: `scratch()` and the worker's own pip settings
    (BUILD_VARIABLE_*). A run's variables are never among them: they are not the worker's."""
    env = scratch()
    for name, value in worker_environ.items():
        if name.startswith(BUILD_VARIABLE_PREFIXES) or name in BUILD_VARIABLES:
            env[name] = value
    return env


def env_fd(env: Mapping[str, str]) -> int:
    """A memfd holding `env` as NUL-separated NAME=VALUE entries (env_handoff's input)."""
    fd = os.memfd_create("torchyard-job-env", os.MFD_CLOEXEC)
    data = b"".join(os.fsencode(f"{k}={v}") + b"\0" for k, v in env.items())
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    return fd


def handed_over(launch: Launch) -> Launch:
    """The job started by the handoff: its environment in a memfd, and `scratch()` (with the
    job's token, the worker's own value that marks every process of an unsandboxed job,
    worker.process) for whatever runs before it. The handoff runs on the worker's own
    interpreter, which every sandbox shows (worker.sandbox.interpreter_paths)."""
    fd = env_fd(launch.env)
    privileged = scratch()
    if JOB_TOKEN_VAR in launch.env:
        privileged[JOB_TOKEN_VAR] = launch.env[JOB_TOKEN_VAR]
    handoff = [sys.executable, "-I", "-S", str(HANDOFF_SCRIPT), env_handoff.ENV_FD_OPTION, str(fd)]
    return replace(
        launch,
        argv=[*handoff, "--", *launch.argv],
        env=privileged,
        pass_fds=(*launch.pass_fds, fd),
    )
