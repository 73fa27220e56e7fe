"""Memory of an idle `torchyard up`: the PSS of its whole process tree.

Starts the real CLI (`torchyard up`, embedded: SQLite database, SQLite broker) on a free port
with a temporary data dir, waits until `/login` answers 200 and the Celery worker has logged
that it is ready, lets it sit idle for a few seconds, then sums PSS
(``/proc/<pid>/smaps_rollup``) over the supervisor and every process below it (the Celery
worker, uvicorn). PSS rather than RSS: shared libraries loaded by all
three processes count once in total, as they do in the machine's memory.

Prints each process's PSS, the sum in MiB and its ratio to Aim's 274 MiB (the design's
measurement of an idle `aim up`; target: under it). It also says whether any process of the
tree has torch loaded (the worker must not: only jobs import torch).

Then the tree's CPU while it sits idle, over `--cpu-window` seconds (utime + stime from
/proc/<pid>/stat, each process and the sum, as % of one core; target: under IDLE_CPU_TARGET).
An idle embedded worker used to poll its SQLite broker 20 times a second, two queries and a
write lock each: 4.9% of a core (stop 52; app/sql_broker.py now asks only a changed file).

    .venv/bin/python bench/idle_memory.py [--idle 5] [--repeats 3] [--cpu-window 30]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

AIM_IDLE_MIB = 274.0
IDLE_CPU_TARGET = 1.0  # % of one core, the whole idle tree
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
READY_TIMEOUT_SECONDS = 120.0
WORKER_READY = re.compile(r"celery@\S+ ready\.")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def children_of(pid: int) -> list[int]:
    """Every descendant of ``pid`` (Linux: /proc/<pid>/task/<tid>/children)."""
    found: list[int] = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            found.extend(kids)
            stack.extend(kids)
    return found


def pss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    raise RuntimeError(f"no Pss line for {pid}")


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` so far (its threads included)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def idle_cpu(pids: list[int], window: float) -> float:
    """Print each process's share of one core over ``window`` idle seconds; return the sum."""
    before = {pid: cpu_seconds(pid) for pid in pids}
    time.sleep(window)
    total = 0.0
    for pid in pids:
        share = 100 * (cpu_seconds(pid) - before[pid]) / window
        total += share
        print(f"  {pid:>7}  {describe(pid):<28} {share:5.2f}% of a core idle")
    print(f"  idle CPU {total:.2f}% of a core; target < {IDLE_CPU_TARGET:g}%: "
          f"ratio {total / IDLE_CPU_TARGET:.2f}")  # fmt: skip
    return total


def loads_torch(pid: int) -> bool:
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


def describe(pid: int) -> str:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    words = [a.decode() for a in argv if a]
    for i, word in enumerate(words):
        if word == "-m" and i + 1 < len(words):
            return words[i + 1]
    return Path(words[1]).name if len(words) > 1 else words[0]


def wait_ready(url: str, log: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until the server answers ``url`` with 200 and the worker has said "ready."."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"torchyard up exited with {proc.returncode}: {log.read_text()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200 and WORKER_READY.search(log.read_text()):
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {READY_TIMEOUT_SECONDS:.0f} s")


def measure_once(idle_seconds: float, cpu_window: float) -> tuple[float, float]:
    """Start `torchyard up`, wait for ready + idle, print the tree's PSS and then its idle
    CPU; return (MiB, % of a core)."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="torchyard-idle-") as data_dir:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("TORCHYARD_DATABASE_URL", "TORCHYARD_BROKER_URL")
        }
        env.update(TORCHYARD_ADMIN_PASSWORD="bench-password")
        cli = Path(sys.executable).with_name("torchyard")
        argv = [str(cli), "up", "--port", str(port), "--data-dir", data_dir]
        log_path = Path(data_dir) / "up.log"
        log = log_path.open("wb")
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_ready(f"http://127.0.0.1:{port}/login", log_path, proc)
            time.sleep(idle_seconds)
            pids = [proc.pid, *children_of(proc.pid)]
            total = 0
            for pid in pids:
                kib = pss_kib(pid)
                total += kib
                torch_note = "  (torch loaded!)" if loads_torch(pid) else ""
                print(f"  {pid:>7}  {describe(pid):<28} {kib / 1024:7.1f} MiB{torch_note}")
            cpu = idle_cpu(pids, cpu_window)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
    mib = total / 1024
    ratio = mib / AIM_IDLE_MIB
    print(f"  total PSS {mib:.1f} MiB; ratio to Aim's {AIM_IDLE_MIB:.0f} MiB: {ratio:.2f}")
    return mib, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--idle", type=float, default=5.0, help="seconds idle before measuring")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpu-window", type=float, default=30.0, help="idle seconds timed")
    args = parser.parse_args()
    figures, cpus = [], []
    for i in range(args.repeats):
        print(f"start {i + 1}:", flush=True)
        mib, cpu = measure_once(args.idle, args.cpu_window)
        figures.append(mib)
        cpus.append(cpu)
    median = statistics.median(figures)
    print(
        f"idle `torchyard up` PSS: median {median:.1f} MiB over {len(figures)} starts "
        f"({min(figures):.1f}-{max(figures):.1f}); Aim idle {AIM_IDLE_MIB:.0f} MiB; "
        f"ratio {median / AIM_IDLE_MIB:.2f} (target < 1)"
    )
    cpu = statistics.median(cpus)
    print(
        f"idle `torchyard up` CPU: median {cpu:.2f}% of a core ({min(cpus):.2f}-{max(cpus):.2f}); "
        f"target < {IDLE_CPU_TARGET:g}%; ratio {cpu / IDLE_CPU_TARGET:.2f}; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


if __name__ == "__main__":
    main()
