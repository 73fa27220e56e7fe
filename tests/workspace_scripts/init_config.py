"""A script with its own config, W&B style: `torchyard.init(config=...)` records every key as
the run's params beside the launch's (tests/test_torchyard_sdk_config.py)."""

from __future__ import annotations

import torchyard

run = torchyard.init(
    config={
        "lr": 0.5,  # the launch says 0.1: the launch wins, and the run says they differ
        "batch_size": 64,
        "model": {"depth": 3, "act": "relu", "widths": [8, 16]},
        "use_amp": True,
    }
)
print("lr used:", run.config["lr"])
for step in range(1, 4):
    run.log({"train/loss": 1.0 / step}, step=step)
run.finish()
