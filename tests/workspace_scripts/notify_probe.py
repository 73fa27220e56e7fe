"""A run that gives each notification a reason: step 1, a stall of --stall seconds, then
(with --nan 1) a NaN loss at step 2, and (with --fail 1) an error. It writes the metrics
spool itself (the line format of docs/architecture.md), so it costs no torch import."""

import argparse
import json
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--stall", type=float, default=0)
parser.add_argument("--nan", type=int, default=0)
parser.add_argument("--fail", type=int, default=0)
args = parser.parse_args()
spool_path = os.path.join(os.environ["TORCHYARD_RUN_DIR"], "metrics.jsonl")


def log(step, values):
    line = {"type": "metrics", "step": step, "time": time.time(), "values": values}
    with open(spool_path, "a") as spool:
        spool.write(json.dumps(line) + "\n")


log(1, {"train/loss": 1.0})
time.sleep(args.stall)
log(2, {"train/loss": None if args.nan else 0.5})  # the SDK writes NaN as null
time.sleep(1)  # the forwarder moves step 2 while the run still runs
if args.fail:
    raise RuntimeError("the loss diverged")
