"""What does reporting metrics every step cost the training loop?

Times one CPU training loop (a small MLP, one thread) three ways, in short blocks (500 steps)
interleaved many times (24 rounds, so 12,000 steps per mode): on a shared box, many short
blocks give the best-of a fair chance to catch quiet moments for every mode, and runs from
the same round see the same background load. The three ways:

- bare:     zero_grad -> forward -> backward -> step, nothing else;
- values:   the same plus computing the 4 metric values a loop reports (loss.item(), batch
            accuracy, lr, epoch), without reporting them;
- reported: the same plus ``Reporter.log`` of those 4 metrics every step, with the writer
            thread appending to a real metrics.jsonl in a temporary directory.

Prints steps/s by wall clock (best and median of the repeats), the ratios (also the median
of the ratios of runs from the same round, the least sensitive to drift), the same by
process CPU time (all threads, so the writer thread's work counts too, and time stolen by
other processes on a shared box does not), and the per-call cost of ``Reporter.log`` in
microseconds. Target: reported/values >= 0.98.

Then the same inside a real job (``--job-only`` runs only this part, ``--skip-job`` skips
it): bench/log_overhead_job.py started as torchyard starts a user script, with
worker.launcher's argv and environment (``python -m torchyard.job``, the run's own
metrics.jsonl, the reporter's writer thread), logging through ``torchyard.init()`` and
``run.log({...}, step=N)``. It prints the logged/unlogged ratio, the per-step cost of
logging taken from the two rates, and ``run.log``'s cost per call in a tight loop.

    .venv/bin/python bench/log_overhead.py [--steps 500] [--repeats 24] [--job-only]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from app.experiments.config.model import run_config  # noqa: E402
from torchyard.contract import LOG_FILE, METRICS_FILE  # noqa: E402
from torchyard.runtime.reporter import Reporter  # noqa: E402
from worker.launcher import LaunchSpec, build_launch  # noqa: E402

JOB_SCRIPT = Path(__file__).resolve().parent / "log_overhead_job.py"

TARGET_RATIO = 0.98


def make_model(width: int, hidden: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(width, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 10),
    )


def make_batches(count: int, batch: int, width: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    return [
        (
            torch.randn(batch, width, generator=generator),
            torch.randint(0, 10, (batch,), generator=generator),
        )
        for _ in range(count)
    ]


def train(args: argparse.Namespace, mode: str, spool: Path) -> tuple[float, float, float]:
    """Run ``args.steps`` steps in ``mode``; return (steps/s wall, steps/s of process CPU
    time, seconds close() took)."""
    model = make_model(args.width, args.hidden)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batches = make_batches(64, args.batch, args.width)
    reporter = Reporter(spool, enabled=True) if mode == "reported" else None
    lr, epoch = 0.01, 1
    started = time.perf_counter()
    cpu_started = time.process_time()
    for step in range(1, args.steps + 1):
        x, y = batches[step % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
        if mode == "bare":
            continue
        values = {
            "train/loss": loss.item(),
            "train/acc": (logits.detach().argmax(dim=1) == y).float().mean().item(),
            "lr": lr,
            "epoch": epoch,
        }
        if reporter is not None:
            reporter.log(step, values)
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    close_seconds = 0.0
    if reporter is not None:
        t0 = time.perf_counter()
        reporter.close()
        close_seconds = time.perf_counter() - t0
        lines = spool.read_text().count("\n")
        assert lines == args.steps, f"expected {args.steps} lines in the spool, found {lines}"
        spool.unlink()
    return args.steps / elapsed, args.steps / cpu, close_seconds


def log_call_costs(spool: Path, calls: int = 200_000) -> tuple[float, float, float]:
    """Microseconds per point, 4 Python floats each, best of 5 chunks of ``calls``:

    - the hot path alone: ``log()`` with the writer asleep (what the training thread pays);
    - the writer's formatting and write per line (paid off the training thread, at close);
    - ``log()`` in a tight loop with the writer running, so both compete for the GIL: the
      whole cost of a point when nothing else is going on.
    """
    values = {"train/loss": 0.123, "train/acc": 0.875, "lr": 0.01, "epoch": 1.0}

    def timed_logs(reporter: Reporter) -> float:
        log: Callable[..., None] = reporter.log
        best = float("inf")
        for chunk in range(5):
            base = chunk * calls
            started = time.perf_counter()
            for step in range(base + 1, base + calls + 1):
                log(step, values)
            best = min(best, (time.perf_counter() - started) / calls * 1e6)
        return best

    idle = Reporter(spool, enabled=True, interval=3600, max_pending=10 * calls)
    hot_path = timed_logs(idle)
    started = time.perf_counter()
    idle.close()
    writer_per_line = (time.perf_counter() - started) / (5 * calls) * 1e6
    spool.unlink()
    running = Reporter(spool, enabled=True)
    contended = timed_logs(running)
    running.close()
    spool.unlink()
    return hot_path, writer_per_line, contended


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def in_job(args: argparse.Namespace) -> None:
    """bench/log_overhead_job.py as a torchyard job: launcher argv + env, run dir as cwd."""
    with tempfile.TemporaryDirectory(prefix="torchyard-bench-job-") as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        out = Path(tmp) / "result.json"
        params = {
            "steps": args.steps,
            "repeats": args.repeats,
            "batch": args.batch,
            "width": args.width,
            "hidden": args.hidden,
            "calls": args.calls,
            "out": str(out),
        }
        config = {
            "script": JOB_SCRIPT.name,
            "params": params,
            "seed": 0,
            "resources": {"gpus": 0, "nproc": 1},
        }
        launch = build_launch(
            LaunchSpec(
                run_id=1,
                run_dir=run_dir,
                config=run_config(config),
                python=sys.executable,
                job_token="bench",
                master_port=free_port(),
                base_env=dict(os.environ),
                script=JOB_SCRIPT,
                workspace=JOB_SCRIPT.parent,
            )
        )
        with open(run_dir / LOG_FILE, "wb") as log:
            code = subprocess.call(
                launch.argv, env=launch.env, cwd=run_dir, stdout=log, stderr=subprocess.STDOUT
            )
        if code != 0 or not out.exists():
            raise SystemExit(f"the job failed ({code}):\n{(run_dir / LOG_FILE).read_text()}")
        result = json.loads(out.read_text())
        # The metrics lines only: the job's spool also holds what init() records (its config).
        spool = (run_dir / METRICS_FILE).read_bytes().splitlines()
        lines = sum(1 for line in spool if line.startswith(b'{"type": "metrics"'))
        if lines != result["logged"]:
            raise SystemExit(
                f"{result['logged']} run.log calls, {lines} metrics lines in the spool "
                f"({len(spool)} lines in all)"
            )
    rates, cpu_rates = result["rates"], result["cpu_rates"]
    best = {mode: max(v) for mode, v in rates.items()}
    median = {mode: statistics.median(v) for mode, v in rates.items()}
    paired = statistics.median(
        lg / vl for lg, vl in zip(rates["logged"], rates["values"], strict=True)
    )
    cpu_best = {mode: max(v) for mode, v in cpu_rates.items()}
    print(
        f"inside a real job (python -m torchyard.job, launcher env; in_torchyard="
        f"{result['in_torchyard']}): {args.steps} steps x {args.repeats} repeats per mode"
    )
    for mode in ("values", "logged"):
        print(f"  {mode:<7} best {best[mode]:8.1f} steps/s   median {median[mode]:8.1f} steps/s")
    ratio = best["logged"] / best["values"]
    median_ratio = median["logged"] / median["values"]
    print(
        f"  ratio logged/values: best {ratio:.4f}   median {median_ratio:.4f}"
        f"   median of per-round pairs {paired:.4f}   CPU time (best) "
        f"{cpu_best['logged'] / cpu_best['values']:.4f}"
    )
    per_step_us = (1 / median["logged"] - 1 / median["values"]) * 1e6
    print(f"  logging's cost per step from the median rates: {per_step_us:.1f} us (noisy)")
    print(f"  run.log in a tight loop (writer running): {result['log_call_us']:.2f} us per call")
    verdict = "OK" if ratio >= TARGET_RATIO else "BELOW TARGET"
    print(f"  target logged/values >= {TARGET_RATIO}: {verdict} ({ratio:.4f})")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=24)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=784)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=100_000, help="per chunk, in-job run.log")
    parser.add_argument("--job-only", action="store_true", help="only the in-job measurement")
    parser.add_argument("--skip-job", action="store_true", help="only the in-process ones")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not args.skip_job:
        in_job(args)
    if args.job_only:
        return

    modes = ("bare", "values", "reported")
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    cpu_rates: dict[str, list[float]] = {mode: [] for mode in modes}
    closes: list[float] = []
    with tempfile.TemporaryDirectory(prefix="torchyard-bench-") as tmp:
        spool = Path(tmp) / "metrics.jsonl"
        for mode in modes:  # warm-up: allocator, autograd caches, first-touch pages
            train(argparse.Namespace(**{**vars(args), "steps": 300}), mode, spool)
        for repeat in range(args.repeats):
            # Interleaved, and in a rotated order each round, so drift in machine load and
            # the position within a round hit every mode alike.
            shift = repeat % len(modes)
            for mode in modes[shift:] + modes[:shift]:
                rate, cpu_rate, close_seconds = train(args, mode, spool)
                rates[mode].append(rate)
                cpu_rates[mode].append(cpu_rate)
                if mode == "reported":
                    closes.append(close_seconds)
        hot_path, writer_per_line, contended = log_call_costs(spool)

    print(
        f"MLP {args.width}-{args.hidden}-{args.hidden}-10, batch {args.batch}, "
        f"{args.threads} thread(s), {args.steps} steps x {args.repeats} repeats, "
        f"4 metrics per step"
    )
    best = {mode: max(values) for mode, values in rates.items()}
    median = {mode: statistics.median(values) for mode, values in rates.items()}
    for mode in modes:
        print(f"  {mode:<9} best {best[mode]:8.1f} steps/s   median {median[mode]:8.1f} steps/s")
    for label, stat in (("best", best), ("median", median)):
        print(
            f"  ratio ({label}): reported/values {stat['reported'] / stat['values']:.4f}   "
            f"reported/bare {stat['reported'] / stat['bare']:.4f}"
        )
    pairs = zip(rates["reported"], rates["values"], strict=True)
    paired = statistics.median(r / v for r, v in pairs)
    print(f"  ratio (median of per-round pairs): reported/values {paired:.4f}")
    cpu_best = {mode: max(values) for mode, values in cpu_rates.items()}
    print(
        "  by process CPU time (best): "
        + "   ".join(f"{mode} {cpu_best[mode]:.1f}" for mode in modes)
        + " steps/CPU-s"
    )
    print(
        f"  ratio (CPU time, best): reported/values "
        f"{cpu_best['reported'] / cpu_best['values']:.4f}   "
        f"reported/bare {cpu_best['reported'] / cpu_best['bare']:.4f}"
    )
    print(f"  Reporter.log hot path: {hot_path:.2f} us per call (4 floats, writer idle)")
    print(f"  writer thread: {writer_per_line:.2f} us per line (format + write, off the loop)")
    print(f"  Reporter.log in a tight loop with the writer running: {contended:.2f} us per call")
    print(f"  close() drain at the end of a run: {max(closes) * 1e3:.1f} ms at most")
    ratio = best["reported"] / best["values"]
    verdict = "OK" if ratio >= TARGET_RATIO else "BELOW TARGET"
    print(f"  target reported/values >= {TARGET_RATIO}: {verdict} ({ratio:.4f})")


if __name__ == "__main__":
    main()
