"""digits_cnn: a small CNN on the 8x8 handwritten digits (UCI, as scikit-learn bundles them).

Small enough to train to ~98% validation accuracy in about a second on two CPU cores,
which makes it the end-to-end proof that the platform trains correctly, not only that it
runs something.
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor, nn
from torch.utils.data import TensorDataset

from torchyard.recipes.catalog import RECIPES
from torchyard.recipes.digits_data import N_CLASSES, load_digits
from torchyard.recipes.training import evaluate, fit
from torchyard.runtime.context import JobContext

__all__ = ["build_model", "evaluate", "load_split", "main"]

log = logging.getLogger(__name__)


def build_model() -> nn.Module:
    """Two 3x3 conv layers (8x8 -> 4x4 after pooling) and a small classifier head.

    BatchNorm after each conv is what gets the 230 steps of the default config to ~98-99%
    validation accuracy across seeds; without it the same net ends at 92-97% depending on
    the seed.
    """
    return nn.Sequential(
        nn.Conv2d(1, 16, kernel_size=3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, kernel_size=3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64),
        nn.ReLU(),
        nn.Linear(64, N_CLASSES),
    )


def load_split(seed: int, val_fraction: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(x_train, y_train, x_val, y_val)``: a random split fixed by ``seed``.

    The permutation comes from its own generator, not the global one, so the split does
    not depend on what else consumed random numbers before, and the same seed always holds
    out the same images (a resumed run evaluates on the very same split).
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    images, labels = load_digits()
    generator = torch.Generator().manual_seed(int(seed))
    order = torch.randperm(len(labels), generator=generator).numpy()
    n_val = max(1, round(len(labels) * val_fraction))
    val_idx, train_idx = order[:n_val], order[n_val:]
    # Fancy indexing copies, so the tensors own writable memory (the cache is read-only).
    return (
        torch.from_numpy(images[train_idx]),
        torch.from_numpy(labels[train_idx]),
        torch.from_numpy(images[val_idx]),
        torch.from_numpy(labels[val_idx]),
    )


def main(ctx: JobContext) -> dict[str, float]:
    """Train as ``ctx.params`` say (catalog defaults fill any gap); return the last metrics."""
    params = {**RECIPES["digits_cnn"].defaults(), **ctx.params}
    x_train, y_train, x_val, y_val = load_split(ctx.seed, float(params["val_fraction"]))
    log.info("digits: %d train / %d val images", len(x_train), len(x_val))
    return fit(
        ctx,
        build_model(),
        params,
        train_set=TensorDataset(x_train, y_train),
        x_val=x_val,
        y_val=y_val,
    )
