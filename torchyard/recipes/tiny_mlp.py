"""tiny_mlp: a tiny MLP on generated data, for smoke tests and demos.

Starts training in well under a second, and has two knobs the platform's own tests need:
``step_sleep`` keeps a run alive long enough to cancel it mid-run, and ``fail_at_step``
makes it crash at a known step, to check that everything logged before the crash survives
and the traceback reaches the run's log.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import Dataset

from torchyard.recipes.catalog import RECIPES
from torchyard.recipes.training import evaluate, fit
from torchyard.runtime.context import JobContext

__all__ = ["build_model", "evaluate", "make_data", "main"]

log = logging.getLogger(__name__)

N_FEATURES = 16
N_CLASSES = 4
POOL_SIZE = 4096
VAL_SIZE = 512


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(N_FEATURES, 32), nn.ReLU(), nn.Linear(32, N_CLASSES))


class PooledDataset(Dataset[tuple[Tensor, Tensor]]):
    """``length`` samples drawn from a fixed pool: an epoch of ``steps_per_epoch`` batches
    without generating (or holding) ``steps_per_epoch * batch_size`` samples."""

    def __init__(self, x: Tensor, y: Tensor, length: int) -> None:
        self.x, self.y, self.length = x, y, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        j = index % len(self.x)
        return self.x[j], self.y[j]


def make_data(
    seed: int, n_train: int, n_val: int = VAL_SIZE
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(x_train, y_train, x_val, y_val)`` labelled by a random linear teacher (argmax of
    ``x @ W``), all from a generator seeded by ``seed``: learnable, never the same task for
    two seeds, identical for one."""
    generator = torch.Generator().manual_seed(int(seed))
    teacher = torch.randn(N_FEATURES, N_CLASSES, generator=generator)
    x = torch.randn(n_train + n_val, N_FEATURES, generator=generator)
    y = (x @ teacher).argmax(dim=1)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def main(ctx: JobContext) -> dict[str, float]:
    """Train as ``ctx.params`` say (catalog defaults fill any gap); return the last metrics."""
    params: dict[str, Any] = {**RECIPES["tiny_mlp"].defaults(), **ctx.params}
    steps_per_epoch = int(params["steps_per_epoch"])
    batch_size = int(params["batch_size"])
    # Under DDP each rank takes batch_size // world_size samples a step, so an epoch of
    # steps_per_epoch * batch_size samples is still steps_per_epoch steps.
    epoch_samples = steps_per_epoch * batch_size
    x_pool, y_pool, x_val, y_val = make_data(ctx.seed, min(epoch_samples, POOL_SIZE))
    step_sleep = float(params["step_sleep"])
    fail_at_step = int(params["fail_at_step"])

    def before_step(step: int) -> None:
        if fail_at_step and step == fail_at_step:
            raise RuntimeError(f"tiny_mlp: failing on purpose at step {step}")
        if step_sleep:
            time.sleep(step_sleep)

    return fit(
        ctx,
        build_model(),
        params,
        train_set=PooledDataset(x_pool, y_pool, epoch_samples),
        x_val=x_val,
        y_val=y_val,
        before_step=before_step,
    )
