"""The job's first process of its own: it takes the job's environment from a descriptor and
execs the job with exactly that environment
(``python -I -S env_handoff.py --env-fd N -- ARGV...``).

Every process torchyard starts before the job (the keeper, the network helper, bwrap, setpriv,
slirp4netns, ip) may run as root, and a run's variables are a member's data: LD_AUDIT or
GCONV_PATH in a root program's environment runs the member's library as root. So those
processes get an environment the worker builds from nothing (worker.privileged_env), and the
job's own (the run's ``env``, the launcher's variables, HOME) travels in a memfd the worker
wrote, which only this script reads, after the privilege drop and inside the sandbox. Not in
argv: argv is world-readable in /proc/<pid>/cmdline, a process's environment and descriptors
are not.

Run as a file with ``-I -S``: no site, no user site, no PYTHON* variable, nothing imported
but the standard library's ``os`` and ``sys`` (a member's ``usercustomize`` or a ``.pth`` file
in their environment cannot run before the job proper does).
"""

from __future__ import annotations

import os
import sys

ENV_FD_OPTION = "--env-fd"
# The job could not be started: the keeper's own code for it (worker.keeper).
CANNOT_START = 127
BAD_USAGE = 126


def read_environment(fd: int) -> dict[str, str]:
    """``NAME=VALUE`` entries separated by NUL bytes, as /proc/<pid>/environ holds them, read
    from offset 0 (the descriptor's offset is shared with whoever else holds it)."""
    chunks = []
    offset = 0
    while chunk := os.pread(fd, 1 << 16, offset):
        chunks.append(chunk)
        offset += len(chunk)
    env: dict[str, str] = {}
    for entry in b"".join(chunks).split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if name and sep:
            env[os.fsdecode(name)] = os.fsdecode(value)
    return env


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[0] != ENV_FD_OPTION or argv[2] != "--" or not argv[1].isdigit():
        print(f"usage: env_handoff.py {ENV_FD_OPTION} N -- ARGV...", file=sys.stderr)
        os._exit(BAD_USAGE)
    fd = int(argv[1])
    command = argv[3:]
    try:
        env = read_environment(fd)
        os.close(fd)
    except OSError as exc:
        print(f"torchyard: could not read the job's environment: {exc}", file=sys.stderr)
        os._exit(BAD_USAGE)
    sys.stderr.flush()
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"torchyard: could not start the job ({command[0]}): {exc}", file=sys.stderr)
        os._exit(CANNOT_START)


if __name__ == "__main__":
    main(sys.argv[1:])
