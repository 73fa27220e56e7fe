"""Seeding and seeded DataLoaders: the same seed gives the same numbers, another seed others."""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, TensorDataset

from torchyard.runtime.data import epoch_seed, make_loader, set_epoch
from torchyard.runtime.seeding import seed_everything

pytestmark = pytest.mark.usefixtures("restore_torch_state")


def draws() -> tuple[float, float, list[float]]:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_same_seed_gives_the_same_draws_from_every_generator() -> None:
    seed_everything(1029)
    first = draws()
    seed_everything(1029)
    assert draws() == first


def test_another_seed_gives_other_draws_from_every_generator() -> None:
    seed_everything(1029)
    a = draws()
    seed_everything(1030)
    b = draws()
    assert a[0] != b[0] and a[1] != b[1] and a[2] != b[2]


def test_seed_beyond_32_bits_is_accepted() -> None:
    seed_everything(2**40 + 5)
    assert torch.initial_seed() == 2**40 + 5


def test_deterministic_turns_on_deterministic_kernels_and_cublas_config() -> None:
    seed_everything(3, deterministic=True)
    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.backends.cudnn.deterministic is True
    assert torch.backends.cudnn.benchmark is False
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    assert os.environ["PYTHONHASHSEED"] == "3"


def test_non_deterministic_resets_the_flags_but_keeps_benchmark_off() -> None:
    seed_everything(3, deterministic=True)
    seed_everything(3, deterministic=False)
    assert not torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic is False
    assert torch.backends.cudnn.benchmark is False


def batches(loader: torch.utils.data.DataLoader) -> list[list[int]]:
    return [batch[0].tolist() for batch in loader]


DATA = TensorDataset(torch.arange(40))


def test_loader_order_follows_the_seed_not_the_global_generator() -> None:
    a = make_loader(DATA, batch_size=8, shuffle=True, seed=5)
    torch.manual_seed(123)  # must not matter: the loader has its own generator
    b = make_loader(DATA, batch_size=8, shuffle=True, seed=5)
    c = make_loader(DATA, batch_size=8, shuffle=True, seed=6)
    assert batches(a) == batches(b)
    assert batches(a) != batches(c)
    assert sorted(sum(batches(a), [])) == list(range(40))


def test_set_epoch_gives_each_epoch_its_own_order_and_repeats_it_on_demand() -> None:
    loader = make_loader(DATA, batch_size=8, shuffle=True, seed=5)
    set_epoch(loader, 1, seed=5)
    epoch1 = batches(loader)
    set_epoch(loader, 2, seed=5)
    epoch2 = batches(loader)
    fresh = make_loader(DATA, batch_size=8, shuffle=True, seed=5)
    set_epoch(fresh, 2, seed=5)  # a resumed run starting at epoch 2
    assert epoch1 != epoch2
    assert batches(fresh) == epoch2
    assert epoch_seed(5, 2) != epoch_seed(5, 3) != epoch_seed(6, 2)


def test_set_epoch_calls_a_distributed_samplers_set_epoch() -> None:
    sampler: torch.utils.data.DistributedSampler[Any] = torch.utils.data.DistributedSampler(
        DATA, num_replicas=2, rank=1, seed=5
    )
    loader = make_loader(DATA, batch_size=4, shuffle=False, seed=5, sampler=sampler)
    set_epoch(loader, 7, seed=5)
    assert sampler.epoch == 7
    rank1 = sum(batches(loader), [])
    other: torch.utils.data.DistributedSampler[Any] = torch.utils.data.DistributedSampler(
        DATA, num_replicas=2, rank=0, seed=5
    )
    other.set_epoch(7)
    assert len(rank1) == 20 and not set(rank1) & set(other)  # disjoint shards


def test_loader_refuses_shuffle_with_a_sampler() -> None:
    sampler = torch.utils.data.SequentialSampler(DATA)
    with pytest.raises(ValueError, match="sampler"):
        make_loader(DATA, batch_size=4, shuffle=True, seed=1, sampler=sampler)


def test_loader_options_pass_through() -> None:
    loader = make_loader(
        DATA, batch_size=16, shuffle=False, seed=1, drop_last=True, persistent_workers=True
    )
    assert [len(b) for b in batches(loader)] == [16, 16]
    assert loader.persistent_workers is False  # no worker processes: nothing to persist
    assert loader.pin_memory is torch.cuda.is_available()


class NumpyNoise(Dataset[tuple[int, float, float]]):
    """Draws from numpy's and random's global state, as augmentation code does."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> tuple[int, float, float]:
        return index, float(np.random.rand()), random.random()


def worker_draws(seed: int) -> list[tuple[int, float, float]]:
    loader = make_loader(NumpyNoise(), batch_size=2, shuffle=False, seed=seed, num_workers=2)
    out: list[Any] = []
    for index, np_draw, py_draw in loader:
        out.extend(zip(index.tolist(), np_draw.tolist(), py_draw.tolist(), strict=True))
    return out


def test_worker_processes_draw_reproducibly_and_differently_from_each_other() -> None:
    a = worker_draws(11)
    assert a == worker_draws(11)
    assert [x[1:] for x in a] != [x[1:] for x in worker_draws(12)]
    # Worker 0 serves batches 0 and 2, worker 1 batches 1 and 3: their first draws differ
    # (without per-worker seeding forked workers would share one numpy state).
    assert a[0][1] != a[2][1] and a[0][2] != a[2][2]
