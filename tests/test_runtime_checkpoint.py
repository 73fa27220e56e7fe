"""Checkpoints: the documented keys, weights-only loading, atomic replacement, unwrapping."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from torchyard.runtime.checkpoint import load_checkpoint, save_checkpoint, unwrap_model


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))


def trained(model: nn.Module) -> torch.optim.Optimizer:
    """A couple of Adam steps, so the optimizer has real state (moments, step counts)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(5, 4)).sum().backward()
        optimizer.step()
    return optimizer


def test_round_trip_restores_model_optimizer_epoch_step_and_config(tmp_path: Path) -> None:
    model = make_model()
    optimizer = trained(model)
    config = {"recipe": "x", "params": {"lr": 0.1}, "seed": 3, "deterministic": True}
    path = tmp_path / "epoch-0002.pt"
    size = save_checkpoint(path, model=model, optimizer=optimizer, epoch=2, step=40, config=config)
    assert size == path.stat().st_size > 0

    state = torch.load(path, weights_only=True)  # what the API's users will do
    assert set(state) == {"model", "optimizer", "epoch", "step", "config"}
    state = load_checkpoint(path)
    assert (state["epoch"], state["step"], state["config"]) == (2, 40, config)

    fresh = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    fresh.load_state_dict(state["model"])
    for key, tensor in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[key], tensor), key
    fresh_optimizer = torch.optim.Adam(fresh.parameters(), lr=0.1)
    fresh_optimizer.load_state_dict(state["optimizer"])
    before = fresh_optimizer.state_dict()["state"]
    after = optimizer.state_dict()["state"]
    assert before.keys() == after.keys()
    for index in after:
        assert torch.equal(before[index]["exp_avg"], after[index]["exp_avg"])


def test_saved_file_is_readable_by_the_server_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "final.pt"
    save_checkpoint(path, model=make_model(), optimizer=None, epoch=1, step=1, config={})
    assert os.listdir(tmp_path) == ["final.pt"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_failed_save_keeps_the_old_file_intact_and_cleans_up(tmp_path: Path) -> None:
    path = tmp_path / "final.pt"
    save_checkpoint(path, model=make_model(), optimizer=None, epoch=1, step=10, config={})
    good = path.read_bytes()
    # A lambda cannot be pickled: torch.save fails half way through writing.
    with pytest.raises(Exception, match="lambda|pickle|Can't"):
        save_checkpoint(
            path, model=make_model(), optimizer=None, epoch=2, step=20, config={"bad": lambda: None}
        )
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["final.pt"]
    assert load_checkpoint(path)["step"] == 10


def test_overwriting_replaces_the_file_atomically(tmp_path: Path) -> None:
    path = tmp_path / "final.pt"
    save_checkpoint(path, model=make_model(), optimizer=None, epoch=1, step=10, config={})
    inode = path.stat().st_ino
    save_checkpoint(path, model=make_model(), optimizer=None, epoch=2, step=20, config={})
    assert load_checkpoint(path)["step"] == 20
    assert path.stat().st_ino != inode  # a new file renamed over, not rewritten in place


class Payload:
    """Stands for any pickled object whose class a malicious file could name."""


def test_loading_refuses_pickled_objects(tmp_path: Path) -> None:
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "epoch": 1, "step": 1, "hook": Payload()}, path)
    with pytest.raises(Exception, match="[Ww]eights only"):
        load_checkpoint(path)


def test_loading_something_else_says_so(tmp_path: Path) -> None:
    path = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, path)
    with pytest.raises(ValueError, match="not a torchyard checkpoint"):
        load_checkpoint(path)


def test_data_parallel_wrapper_is_unwrapped(tmp_path: Path) -> None:
    model = make_model()
    wrapped = nn.DataParallel(model)
    assert unwrap_model(wrapped) is model
    path = tmp_path / "dp.pt"
    save_checkpoint(path, model=wrapped, optimizer=None, epoch=1, step=1, config={})
    assert set(load_checkpoint(path)["model"]) == set(model.state_dict())  # no "module."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ddp_model_is_saved_as_the_plain_state_dict(tmp_path: Path) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
    )
    try:
        model = make_model()
        ddp = nn.parallel.DistributedDataParallel(model)
        path = tmp_path / "ddp.pt"
        save_checkpoint(path, model=ddp, optimizer=trained(ddp), epoch=1, step=2, config={})
    finally:
        dist.destroy_process_group()
    state = load_checkpoint(path)["model"]
    assert set(state) == set(model.state_dict())
    fresh = make_model()
    fresh.load_state_dict(state)
    assert torch.equal(fresh.state_dict()["0.weight"], model.state_dict()["0.weight"])
