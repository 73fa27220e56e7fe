"""A 20-trial sweep of digits_cnn on CPU, without and with early stopping (issue 19): the total
CPU-seconds each costs (and trial-seconds: the sum of its runs' started-to-finished times)
and the best val/acc each finds.

Each sweep runs on its own real server + Celery worker (SQLite database and broker, a fresh
temporary data dir); CPU-seconds are those of the whole stack (server, worker and every job),
read from this process's reaped children (os.times) once the stack has stopped. Both sweeps
draw the same trials (random, same seed): the difference is what the median rule saved.

    .venv/bin/python bench/sweep_early_stop.py [--trials 20] [--epochs 5] [--concurrent 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def sweep_once(args: argparse.Namespace, early_stop: dict[str, Any] | None) -> dict[str, Any]:
    data_dir = Path(tempfile.mkdtemp(prefix="torchyard-bench-sweep-"))
    password = "bench-password"
    os.environ.update(TORCHYARD_DATA_DIR=str(data_dir), TORCHYARD_ADMIN_PASSWORD=password)
    for var in ("TORCHYARD_DATABASE_URL", "TORCHYARD_BROKER_URL"):
        os.environ.pop(var, None)
    from app.db import get_engine, get_sessionmaker
    from app.settings import get_settings

    for cached in (get_settings, get_engine, get_sessionmaker):
        cached.cache_clear()
    from app.prestart import prestart
    from tests.stack import running_stack

    prestart()
    before = os.times()
    began = time.perf_counter()
    with running_stack(dict(os.environ), data_dir / "logs", admin_password=password) as stack:
        api = stack.admin_client()
        config = {"recipe": "digits_cnn", "params": {"epochs": args.epochs}, "seed": 1029}
        exp = api.post("/api/experiments", json={"name": "bench", "config": config}).json()
        spec = {
            "experiment_id": exp["id"],
            "method": "random",
            "metric": {"name": "val/acc", "goal": "maximize"},
            "parameters": {
                "params.lr": {"distribution": "log_uniform", "min": 1e-5, "max": 0.3},
                "params.optimizer": {"values": ["sgd", "adam"]},
            },
            "max_runs": args.trials,
            "max_concurrent": args.concurrent,
            "early_stop": early_stop,
            "seed": 19,
        }
        r = api.post("/api/sweeps", json=spec)
        r.raise_for_status()
        while (sweep := api.get(f"/api/sweeps/{r.json()['id']}").json())["status"] == "running":
            time.sleep(1.0)
    wall = time.perf_counter() - began
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    stopped = sum(1 for t in sweep["trials"] if t["stopped_early"])
    trained = sum(
        datetime.fromisoformat(r["finished_at"]).timestamp()
        - datetime.fromisoformat(r["started_at"]).timestamp()
        for r in sweep["runs"]
        if r["started_at"] and r["finished_at"]
    )
    return {
        "trained": trained,
        "cpu": cpu,
        "wall": wall,
        "best": sweep["best"]["value"] if sweep["best"] else float("nan"),
        "stopped": stopped,
        "counts": sweep["counts"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--concurrent", type=int, default=2)
    args = parser.parse_args()
    for label, rule in (("no early stop", None), ("median rule", {"type": "median"})):
        got = sweep_once(args, rule)
        print(
            f"{label}: {args.trials} trials of digits_cnn ({args.epochs} epochs), "
            f"{got['cpu']:.0f} CPU-s, {got['trained']:.0f} trial-seconds, "
            f"{got['wall']:.0f} s wall, best val/acc {got['best']:.4f}, "
            f"{got['stopped']} stopped early, {got['counts']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
