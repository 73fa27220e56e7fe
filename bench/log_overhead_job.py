"""The training loop that bench/log_overhead.py runs inside a real torchyard job.

Started as a user script is (worker.launcher's argv and environment, ``python -m
torchyard.job``), it logs through the public API, ``run = torchyard.init(); run.log({...},
step=N)``, to the run's real metrics.jsonl. Two modes in short interleaved blocks, in a
rotated order each round:

- values: the loop computes the 4 metric values it would report, and does not report them;
- logged: the same plus ``run.log`` of those values every step.

Then ``run.log`` alone in a tight loop (the writer thread running, as in the job), best of 5
chunks. Writes the figures as JSON to the ``out`` param. Imports only torchyard, torch and
the standard library, as a job should.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import torchyard

run = torchyard.init(
    config={
        "steps": 500,
        "repeats": 24,
        "batch": 64,
        "width": 784,
        "hidden": 256,
        "calls": 100_000,
        "out": "",
    }
)
cfg = run.config
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(cfg["width"], cfg["hidden"]),
    nn.ReLU(),
    nn.Linear(cfg["hidden"], cfg["hidden"]),
    nn.ReLU(),
    nn.Linear(cfg["hidden"], 10),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
generator = torch.Generator().manual_seed(0)
batches = [
    (
        torch.randn(cfg["batch"], cfg["width"], generator=generator),
        torch.randint(0, 10, (cfg["batch"],), generator=generator),
    )
    for _ in range(64)
]
next_step = 1  # steps grow across blocks: every logged point is a new one
logged = 0  # run.log calls, checked against the spool's lines by the harness


def train(mode: str, steps: int) -> tuple[float, float]:
    """``steps`` training steps in ``mode``; (steps/s by the wall clock, steps/CPU-s)."""
    global next_step, logged
    lr, epoch = 0.01, 1
    log = run.log
    started, cpu_started = time.perf_counter(), time.process_time()
    for step in range(next_step, next_step + steps):
        x, y = batches[step % len(batches)]
        optimizer.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
        values = {
            "train/loss": loss.item(),
            "train/acc": (logits.detach().argmax(dim=1) == y).float().mean().item(),
            "lr": lr,
            "epoch": epoch,
        }
        if mode == "logged":
            log(values, step=step)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    next_step += steps
    logged += steps if mode == "logged" else 0
    return steps / elapsed, steps / cpu


def log_call_us(calls: int) -> float:
    """Microseconds per ``run.log`` of 4 floats in a tight loop, best of 5 chunks."""
    global next_step, logged
    values = {"train/loss": 0.123, "train/acc": 0.875, "lr": 0.01, "epoch": 1.0}
    log = run.log
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for step in range(next_step, next_step + calls):
            log(values, step=step)
        best = min(best, (time.perf_counter() - started) / calls * 1e6)
        next_step += calls
        logged += calls
    return best


modes = ("values", "logged")
rates: dict[str, list[float]] = {mode: [] for mode in modes}
cpu_rates: dict[str, list[float]] = {mode: [] for mode in modes}
for mode in modes:  # warm-up: allocator, autograd caches, first-touch pages
    train(mode, 300)
for repeat in range(cfg["repeats"]):
    order = modes if repeat % 2 == 0 else modes[::-1]
    for mode in order:
        rate, cpu_rate = train(mode, cfg["steps"])
        rates[mode].append(rate)
        cpu_rates[mode].append(cpu_rate)
result = {
    "in_torchyard": run.in_torchyard,
    "rates": rates,
    "cpu_rates": cpu_rates,
    "log_call_us": log_call_us(cfg["calls"]),
}
result["logged"] = logged  # the job drains the reporter before it exits
if cfg["out"]:
    Path(cfg["out"]).write_text(json.dumps(result))
