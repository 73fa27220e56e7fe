"""Run a command in a cgroup of its own that gets only the CPU time nothing else wants.

`make test` (issue 38: CI under 40 minutes on 2 cores) runs its timed tests, whose bounds are
the product's promises ("gone within 5 s of a cancel", "answers within a second beside a fork
bomb"), at the normal priority, and everything else beside them through this: the kernel's
idle scheduling class for a group (cgroup `cpu.idle`, Linux 5.15) runs the group's processes
only on a core nobody else wants, and any other process that wakes preempts them at once. A
timed pass keeps 1.4 of 2 cores busy on average (it mostly waits on heartbeats, TTLs and
process starts); the rest of the suite computes in the time it leaves. Where `cpu.idle` is
missing, the group gets the smallest weight there is (v1 `cpu.shares` 2, v2 `cpu.weight` 1).

The command's jobs would escape the group (a worker makes its jobs' cgroups at the hierarchy's
root): `TORCHYARD_JOB_CGROUP_PARENT` is set to a parent inside it, so they stay idle too.

Usage: python bench/cpu_idle.py COMMAND [ARG ...]; exits with the command's status, or 2 when
the group cannot be made (not root, no cgroup hierarchy): running the rest beside the timed
tests at the same priority breaks their bounds, so it is not done silently.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

from worker import cgroups


def make_group(name: str) -> Path:
    """The idle group under the cpu controller's root, this process moved into it."""
    hierarchy = cgroups.find_hierarchy()
    if hierarchy is None:
        raise OSError("no cgroup hierarchy with the memory, cpu and pids controllers")
    roots = dict(hierarchy.roots)
    root = roots["unified"] if hierarchy.version == 2 else roots["cpu"]
    group = root / name
    group.mkdir(exist_ok=True)
    if (group / "cpu.idle").exists():
        (group / "cpu.idle").write_text("1")
    elif hierarchy.version == 2:
        (group / "cpu.weight").write_text("1")
    else:
        (group / "cpu.shares").write_text("2")
    (group / "cgroup.procs").write_text(str(os.getpid()))
    return group


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    name = f"torchyard-ci-idle-{os.getpid()}"
    try:
        group = make_group(name)
    except OSError as exc:
        print(f"cpu_idle: cannot run {argv[0]} in an idle cgroup: {exc}", file=sys.stderr)
        return 2
    env = dict(os.environ, TORCHYARD_JOB_CGROUP_PARENT=f"{name}/torchyard")
    print(f"cpu_idle: {' '.join(argv)} in {group} (idle)", flush=True)
    status = subprocess.call(argv, env=env)
    with contextlib.suppress(OSError):
        (group.parent / "cgroup.procs").write_text(str(os.getpid()))
    remove_empty(name)
    return status


def remove_empty(name: str) -> None:
    """The group and the jobs' parents made inside it under every controller, deepest first;
    a folder a process outlived its command in stays."""
    hierarchy = cgroups.find_hierarchy()
    for _, root in hierarchy.roots if hierarchy else ():
        top = root / name
        for folder in sorted(top.rglob("*"), key=lambda f: len(f.parts), reverse=True):
            if folder.is_dir():
                with contextlib.suppress(OSError):
                    folder.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
