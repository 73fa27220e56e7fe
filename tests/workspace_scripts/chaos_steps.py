"""The chaos test's job (tests/test_chaos.py): `--steps` steps of `--step_sleep` s each, and at
every step a line in its own run directory saying which GPUs it holds (its own
CUDA_VISIBLE_DEVICES), which attempt's job it is (its job token) and when (wall clock). From
those lines the test tells whether two jobs ever held one GPU at the same moment.

It writes the metrics spool itself (the line format of docs/architecture.md), with no torch
import, so a loaded box starts it in a moment."""

import argparse
import json
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, required=True)
parser.add_argument("--step_sleep", type=float, required=True)
args = parser.parse_args()
run_dir = os.environ["TORCHYARD_RUN_DIR"]
token = os.environ.get("TORCHYARD_JOB_TOKEN", "?")
gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
gpu_log = os.path.join(run_dir, f"gpus-{os.getpid()}.jsonl")
with open(os.path.join(run_dir, "metrics.jsonl"), "a") as spool, open(gpu_log, "a") as held:
    for step in range(1, args.steps + 1):
        now = time.time()
        held.write(json.dumps({"token": token, "gpus": gpus, "time": now}) + "\n")
        held.flush()
        line = {"type": "metrics", "step": step, "time": now, "values": {"chaos/step": step}}
        spool.write(json.dumps(line) + "\n")
        spool.flush()
        time.sleep(args.step_sleep)
    held.write(json.dumps({"token": token, "gpus": gpus, "time": time.time()}) + "\n")
