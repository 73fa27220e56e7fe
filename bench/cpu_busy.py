"""Run a command and print how many of the box's cores were busy, on average, while it ran.

`make test` wraps each of its pytest runs in this (issue 26, docs/testing.md): whether the slow
tests mostly wait (heartbeats, polls, process starts) or mostly compute decides whether running
them beside another stream saves time, and only the quiet CI box can say which. The figure is
the whole box's, from /proc/stat: on the quiet CI box that is the suite's own (both streams
together while they run side by side); on a shared box it includes everyone else's work.

Usage: python bench/cpu_busy.py LABEL COMMAND [ARG ...]; exits with the command's status. The
line it prints names LABEL and the command's last `-m` argument (pytest's marker expression).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs since boot: busy is user, nice, system, irq and
    softirq; total adds idle, iowait and steal (time the host gave to other machines)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    busy = user + nice + system + irq + softirq
    return busy, busy + idle + iowait + steal


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    label, command = argv[0], argv[1:]
    marks = [command[i + 1] for i, arg in enumerate(command[:-1]) if arg == "-m"]
    if len(marks) > 1:  # the first is `python -m pytest`
        label = f"{label} -m {marks[-1]!r}"
    busy_0, total_0 = cpu_ticks()
    started = time.monotonic()
    status = subprocess.call(command)
    busy_1, total_1 = cpu_ticks()
    wall = time.monotonic() - started
    cores = os.cpu_count() or 1
    share = (busy_1 - busy_0) / max(total_1 - total_0, 1)
    print(
        f"cpu_busy [{label}]: {share * cores:.2f} of {cores} cores busy on average over"
        f" {wall:.0f} s (the whole box; load {os.getloadavg()[0]:.1f} at the end)",
        flush=True,
    )
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
