"""GPU smoke check on a real NVIDIA box: NVML inventory, a CUDA run through a real worker.

What no CPU machine can show: the worker's inventory read through NVML (not the fake one), a
built-in recipe trained on a leased GPU through the real stack (server, Celery worker, launcher,
forwarder), the job seeing exactly its GPU (CUDA_VISIBLE_DEVICES, torch.cuda), the per-GPU
system series (sys/gpu<i>/util, mem_mb, power_w) read through NVML while it trains, and a
checkpoint that loads back. Prints one line per check and exits non-zero when one fails.

    python bench/gpu_smoke.py [--gpus 1] [--epochs 3] [--isolation off]

`--gpus 0` runs the same flow on a CPU box (no GPU series then), to check the script itself.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FINISHED = ("succeeded", "failed", "cancelled")


def check(ok: bool, what: str) -> bool:
    print(f"{'PASS' if ok else 'FAIL'} {what}", flush=True)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--isolation", default="off", help="TORCHYARD_JOB_ISOLATION")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="torchyard-gpu-smoke-"))
    password = "smoke-password"
    os.environ.update(
        TORCHYARD_DATA_DIR=str(data_dir),
        TORCHYARD_ADMIN_PASSWORD=password,
        TORCHYARD_JOB_ISOLATION=args.isolation,
        TORCHYARD_SYSTEM_METRICS_INTERVAL_SECONDS="1",
    )
    for var in ("TORCHYARD_DATABASE_URL", "TORCHYARD_BROKER_URL", "TORCHYARD_FAKE_GPUS"):
        os.environ.pop(var, None)

    from app.prestart import prestart
    from app.settings import Settings
    from worker.gpus import detect

    inventory = detect(Settings())
    print(f"inventory: source={inventory.source} gpus={inventory.gpus}", flush=True)
    ok = check(
        args.gpus == 0 or (inventory.source == "nvml" and len(inventory.gpus) >= args.gpus),
        f"NVML inventory lists at least {args.gpus} GPU(s)",
    )

    from tests.stack import running_stack

    prestart()
    with running_stack(dict(os.environ), data_dir / "logs", admin_password=password) as stack:
        api = stack.admin_client()
        config = {
            "recipe": "digits_cnn",
            "params": {"epochs": args.epochs},
            "seed": 7,
            "resources": {"gpus": args.gpus, "nproc": 1},
        }
        exp = api.post("/api/experiments", json={"name": "gpu-smoke", "config": config})
        ok &= check(exp.status_code == 201, f"experiment created ({exp.status_code})")
        t0 = time.monotonic()
        run = api.post(f"/api/experiments/{exp.json()['id']}/runs", json={}).json()
        status = run["status"]
        while status not in FINISHED and time.monotonic() - t0 < args.timeout:
            time.sleep(0.5)
            status = api.get(f"/api/runs/{run['id']}").json()["status"]
        detail = api.get(f"/api/runs/{run['id']}").json()
        wall = time.monotonic() - t0
        ok &= check(status == "succeeded", f"run {run['id']} {status} in {wall:.1f} s")
        print(f"run: gpu_indices={detail.get('gpu_indices')} error={detail.get('error')}")
        log = api.get(f"/api/runs/{run['id']}/logs").text
        print("log tail:\n" + "\n".join(log.splitlines()[-15:]), flush=True)
        series = api.get(f"/api/runs/{run['id']}/metrics").json()["series"]
        print(f"metric keys: {sorted(series)}")
        acc = series.get("val/acc", {}).get("value", [])
        ok &= check(bool(acc) and acc[-1] > 0.9, f"val/acc last {acc[-1] if acc else None}")
        for i in range(args.gpus):
            for name in ("util", "mem_mb", "power_w"):
                values = series.get(f"sys/gpu{i}/{name}", {}).get("value", [])
                ok &= check(
                    bool(values),
                    f"sys/gpu{i}/{name}: {len(values)} points, "
                    f"max {max(values) if values else None}",
                )
        checkpoints = api.get(f"/api/runs/{run['id']}/checkpoints").json()
        ok &= check(bool(checkpoints), f"checkpoints: {[c['name'] for c in checkpoints]}")
        if checkpoints:
            import torch

            body = api.get(f"/api/runs/{run['id']}/checkpoints/{checkpoints[-1]['name']}")
            state = torch.load(io.BytesIO(body.content), weights_only=True)
            ok &= check(
                {"model", "optimizer", "epoch", "step"} <= set(state),
                f"checkpoint loads with weights_only: keys {sorted(state)[:6]}",
            )
        print(json.dumps({"run": run["id"], "status": status, "wall_s": round(wall, 1)}))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
