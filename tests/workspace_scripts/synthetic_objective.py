"""A known function of lr and momentum, reported as a run's metric `objective` (best: 0 at
lr = 0.01, momentum = 0.8): the sweep tests' synthetic search problem. It writes the metrics
spool itself (the line format of docs/architecture.md), so a trial costs no torch import."""

import argparse
import json
import math
import os
import time

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--momentum", type=float, required=True)
args = parser.parse_args()
value = -((math.log10(args.lr) + 2.0) ** 2) - 4.0 * (args.momentum - 0.8) ** 2
line = {"type": "metrics", "step": 1, "time": time.time(), "values": {"objective": value}}
with open(os.path.join(os.environ["TORCHYARD_RUN_DIR"], "metrics.jsonl"), "a") as spool:
    spool.write(json.dumps(line) + "\n")
