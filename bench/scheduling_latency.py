"""Scheduling latency: from a GPU coming free to the next queued run's job starting.

One real worker with a fake inventory of one GPU (TORCHYARD_FAKE_GPUS=0) on the Redis broker,
a real server, a SQLite database of its own in a temporary data dir. Each repetition submits
run A (1 GPU, tiny_mlp for a fixed ~2 s) and right after it run B (1 GPU), which must wait for
A's GPU. Measured from A's finished_at (the transaction that releases A's lease) to:
  - B's started_at (B's lease taken, the job being launched): the scheduling latency;
  - the first byte of B's output.log (the job process is alive and printing);
  - B's first metric point's wall time (the job trains: includes `import torch`).
Target: B started < 2 s after A's GPU came free.

    .venv/bin/python bench/scheduling_latency.py [--reps 5] [--redis redis://127.0.0.1:6379/7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fake_gpu_stack import fake_gpu_stack, tiny_mlp_experiment, unix  # noqa: E402

TARGET_SECONDS = 2.0


def first_output_time(log_path: Path, done: threading.Event, found: dict[str, float]) -> None:
    """Poll (every 5 ms) for the first byte the job writes to its output.log."""
    while not done.is_set():
        try:
            if log_path.stat().st_size > 0:
                found["t"] = time.time()
                return
        except FileNotFoundError:
            pass
        time.sleep(0.005)


def summary(name: str, values: list[float]) -> str:
    median = statistics.median(values)
    return (
        f"{name}: median {median:.3f} s, max {max(values):.3f} s "
        f"(ratio median/target {median / TARGET_SECONDS:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/7")
    args = parser.parse_args()
    started, output, metric = [], [], []
    with fake_gpu_stack("sched", gpus="0", redis=args.redis) as stack:
        api, data_dir = stack.api, stack.data_dir
        exp_a = tiny_mlp_experiment(
            api, "bench-a", steps=20, sleep=0.1
        )  # ~2 s of training once the job is up
        exp_b = tiny_mlp_experiment(api, "bench-b", steps=5, sleep=0.0)
        for rep in range(args.reps):
            a = api.post(f"/api/experiments/{exp_a}/runs", json={}).json()["id"]
            b = api.post(f"/api/experiments/{exp_b}/runs", json={}).json()["id"]
            done, found = threading.Event(), dict[str, Any]()
            watcher = threading.Thread(
                target=first_output_time,
                args=(data_dir / "runs" / str(b) / "output.log", done, found),
            )
            watcher.start()
            while api.get(f"/api/runs/{b}").json()["status"] in ("queued", "running"):
                time.sleep(0.1)
            done.set()
            watcher.join()
            run_a, run_b = api.get(f"/api/runs/{a}").json(), api.get(f"/api/runs/{b}").json()
            assert run_a["status"] == run_b["status"] == "succeeded", (run_a, run_b)
            freed = unix(run_a["finished_at"])
            assert unix(run_b["started_at"]) >= freed, "B started before A let go of the GPU"
            series = api.get(
                f"/api/runs/{b}/metrics", params={"keys": "train/loss", "with_time": "true"}
            ).json()["series"]
            started.append(unix(run_b["started_at"]) - freed)
            if "t" in found:
                output.append(found["t"] - freed)
            if series.get("train/loss", {}).get("time"):
                metric.append(min(series["train/loss"]["time"]) - freed)
            print(
                f"rep {rep + 1}: A freed GPU -> B started {started[-1]:.3f} s, "
                f"first output {output[-1] if output else float('nan'):.3f} s, "
                f"first metric {metric[-1] if metric else float('nan'):.3f} s",
                flush=True,
            )
    print(summary("GPU free -> next run started (lease taken, job launched)", started))
    if output:
        print(summary("GPU free -> next job's first output line", output))
    if metric:
        print(summary("GPU free -> next job's first metric point", metric))
    print(f"target < {TARGET_SECONDS:.0f} s with the Redis broker; {args.reps} repetitions")


if __name__ == "__main__":
    main()
