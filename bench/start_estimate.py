"""Estimated starts against actual starts: a queue of 10 behind 2 running runs on 2 GPUs.

One real worker with a fake inventory of two GPUs (TORCHYARD_FAKE_GPUS=0,1) on the Redis
broker, a real server, a SQLite database of its own in a temporary data dir. Every run is
tiny_mlp of a known length (1 epoch of `--steps` steps, `--sleep` s each: the steps give its
total, and its progress as it logs them). First `--history` runs of the experiment run to
the end (the queued runs' expected length is the median of these: app/gpus/lengths.py). Then
2 runs start; once both have logged a few steps, 10 more are submitted, and each one's
`estimated_start` is read from GET /api/runs/{id} right then. When all have run, each
estimate is set against the run's actual `started_at`:
  error = estimate - actual start (s), relative error = |error| / (actual start - submit).
Target: every relative error < 20% (issue 42's acceptance).

    .venv/bin/python bench/start_estimate.py [--steps 80] [--sleep 0.1] \
        [--redis redis://127.0.0.1:6379/13]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fake_gpu_stack import fake_gpu_stack, tiny_mlp_experiment, unix  # noqa: E402

TARGET = 0.20
QUEUED = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--sleep", type=float, default=0.1)
    parser.add_argument("--history", type=int, default=4)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/13")
    args = parser.parse_args()
    with fake_gpu_stack("estimate", gpus="0,1", redis=args.redis, concurrency=4) as stack:
        api = stack.api
        exp = tiny_mlp_experiment(api, "bench-estimate", steps=args.steps, sleep=args.sleep)

        def submit() -> int:
            response = api.post(f"/api/experiments/{exp}/runs", json={})
            response.raise_for_status()
            return int(response.json()["id"])

        def run(run_id: int) -> dict[str, Any]:
            response = api.get(f"/api/runs/{run_id}")
            response.raise_for_status()
            return dict(response.json())

        def wait_done(ids: list[int]) -> None:
            while any(run(i)["status"] in ("queued", "running") for i in ids):
                time.sleep(0.2)
            failed = [i for i in ids if run(i)["status"] != "succeeded"]
            assert not failed, [run(i) for i in failed]

        history = [submit() for _ in range(args.history)]
        wait_done(history)
        running = [submit(), submit()]
        # Their progress is known once each has logged a few steps.
        while not all(
            run(i)["status"] == "running"
            and run(i)["summary"].get("train/loss", {}).get("step", 0) >= 5
            for i in running
        ):
            time.sleep(0.1)
        submitted = time.time()
        queued = [submit() for _ in range(QUEUED)]
        estimates = {i: run(i) for i in queued}
        wait_done(running + queued)
        rows = []
        for i in queued:
            actual = unix(run(i)["started_at"])
            est = estimates[i]["estimated_start"]
            if est is None:
                print(f"run {i}: no estimate ({estimates[i]['estimate_basis']})")
                rows.append(float("inf"))
                continue
            error = unix(est) - actual
            rel = abs(error) / max(actual - submitted, 1e-9)
            rows.append(rel)
            print(
                f"run {i}: waited {actual - submitted:6.2f} s, estimated "
                f"{unix(est) - submitted:6.2f} s, error {error:+6.2f} s, relative {rel:6.1%}"
                f"  [{estimates[i]['estimate_basis']}]",
                flush=True,
            )
        lengths = [
            unix(run(i)["finished_at"]) - unix(run(i)["started_at"]) for i in history + queued
        ]
    print(
        f"run length (start to end): median {statistics.median(lengths):.2f} s, "
        f"min {min(lengths):.2f} s, max {max(lengths):.2f} s"
    )
    print(f"load average at the end (1, 5, 15 min): {os.getloadavg()}")
    print(
        f"relative error: max {max(rows):.1%}, median {statistics.median(rows):.1%} "
        f"(target < {TARGET:.0%}: {'met' if max(rows) < TARGET else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
