"""DataLoaders whose order and augmentation randomness follow the run's seed.

A DataLoader has three sources of randomness: the sampler's shuffle, the base seed it hands
its worker processes, and whatever numpy/``random`` calls the dataset makes inside those
workers. The first two come from the loader's ``generator``; the third needs a
``worker_init_fn``, because forked workers would otherwise inherit one identical numpy state.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler


def seed_worker(worker_id: int) -> None:
    """Seed numpy and ``random`` in a DataLoader worker from the seed torch gave it.

    torch seeds each worker's torch generator with ``base_seed + worker_id`` (and
    ``base_seed`` comes from the loader's seeded generator), so deriving the rest from
    ``torch.initial_seed()`` makes every worker different from its siblings yet the same
    from run to run.
    """
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)


def epoch_seed(seed: int, epoch: int) -> int:
    """The generator seed for one epoch: a pure function, so a resumed run that starts at
    epoch k shuffles exactly as the uninterrupted run did at epoch k."""
    return (int(seed) * 1_000_003 + int(epoch)) % 2**63


def make_loader(
    dataset: Dataset[Any],
    *,
    batch_size: int,
    shuffle: bool,
    seed: int,
    num_workers: int = 0,
    drop_last: bool = False,
    persistent_workers: bool = False,
    sampler: Sampler[Any] | None = None,
) -> DataLoader[Any]:
    """Build a map-style DataLoader seeded from ``seed``.

    ``pin_memory`` is on only when CUDA is available (pinning without a GPU costs memory
    and gains nothing); ``persistent_workers`` only with worker processes (torch refuses it
    otherwise). With a ``sampler`` (a DistributedSampler under DDP) the order is the
    sampler's job, so ``shuffle`` must be False, as DataLoader itself demands.
    """
    if sampler is not None and shuffle:
        raise ValueError("shuffle=True conflicts with a sampler: let the sampler shuffle")
    generator = torch.Generator()
    generator.manual_seed(int(seed))
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle if sampler is None else False,
        sampler=sampler,
        num_workers=num_workers,
        worker_init_fn=seed_worker,
        generator=generator,
        pin_memory=torch.cuda.is_available(),
        drop_last=drop_last,
        persistent_workers=persistent_workers and num_workers > 0,
    )


def set_epoch(loader: DataLoader[Any], epoch: int, *, seed: int) -> None:
    """Prepare ``loader`` for ``epoch``: call it at the start of every epoch.

    Re-seeds the loader's generator (and a sampler's own generator, if it has one) from
    ``(seed, epoch)`` so each epoch's order depends on nothing but the seed and the epoch
    number, which is what lets a resumed run continue the curve exactly. A
    DistributedSampler gets ``set_epoch(epoch)``, without which every epoch would reuse
    the first epoch's order on every rank.
    """
    if loader.generator is not None:
        loader.generator.manual_seed(epoch_seed(seed, epoch))
    sampler = loader.sampler
    sampler_generator = getattr(sampler, "generator", None)
    if isinstance(sampler_generator, torch.Generator) and sampler_generator is not loader.generator:
        sampler_generator.manual_seed(epoch_seed(seed + 1, epoch))
    set_sampler_epoch = getattr(sampler, "set_epoch", None)
    if callable(set_sampler_epoch):
        set_sampler_epoch(epoch)
