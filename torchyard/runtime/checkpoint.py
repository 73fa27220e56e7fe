"""Checkpoints that are never half-written and never pickle code.

``torch.save`` straight to the final name leaves a truncated file when the process dies
mid-write (a cancelled run, a full disk), and the UI would offer it for download. Writing
to a temporary file in the same directory, fsyncing it and ``os.replace``-ing it into place
makes the switch atomic: readers see the old file or the new one, never a torn one.

Only state_dicts and plain data go in, so the file loads with ``weights_only=True`` and a
checkpoint from a stranger's run cannot execute code on the machine that opens it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

CHECKPOINT_KEYS = ("model", "optimizer", "epoch", "step", "config")


def unwrap_model(model: nn.Module) -> nn.Module:
    """The plain model inside DDP / DataParallel (``.module``) or torch.compile
    (``._orig_mod``) wrappers, so the saved keys have no ``module.`` prefix and load into
    the recipe's bare model."""
    while True:
        if isinstance(model, nn.parallel.DistributedDataParallel | nn.DataParallel):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = model._orig_mod  # type: ignore[assignment]
        else:
            return model


def save_checkpoint(
    path: str | os.PathLike[str],
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    epoch: int,
    step: int,
    config: Mapping[str, Any],
) -> int:
    """Atomically write ``{model, optimizer, epoch, step, config}`` to ``path``.

    ``epoch`` is the number of completed epochs and ``step`` the number of optimizer steps
    done, so resuming continues with epoch ``epoch + 1`` and step ``step + 1``. Returns the
    file's size in bytes.
    """
    target = Path(path)
    state = {
        "model": unwrap_model(model).state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "epoch": int(epoch),
        "step": int(step),
        "config": dict(config),
    }
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        # mkstemp makes the file 0600; the API server (maybe another user in another
        # container) serves checkpoints for download, so make it world-readable like a
        # plain open() would.
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o644)
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(target.parent)
    return target.stat().st_size


def load_checkpoint(
    path: str | os.PathLike[str], map_location: str | torch.device = "cpu"
) -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True`` (tensors and plain containers only).

    ``map_location="cpu"`` by default: ``load_state_dict`` copies into wherever the model
    and optimizer already live, and loading to the saving rank's GPU could land on a
    device this process does not own.
    """
    state = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(state, dict) or not {"model", "epoch", "step"} <= state.keys():
        raise ValueError(f"{path} is not a torchyard checkpoint (needs model, epoch, step)")
    return state


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: Mapping[str, Any]) -> None:
    """Restore the optimizer's state (momentum buffers, Adam moments, step counts) from a
    checkpoint but keep the hyperparameters it was just built with (lr, momentum,
    weight_decay, betas...): ``load_state_dict`` alone would bring back the parent's, and a
    run resumed with another lr would silently train with the old one."""
    built = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    optimizer.load_state_dict(dict(saved))
    if len(built) == len(optimizer.param_groups):
        for group, hyper in zip(optimizer.param_groups, built, strict=True):
            group.update(hyper)


def _fsync_dir(directory: Path) -> None:
    """Persist the rename itself: until the directory entry is synced, a power loss can
    bring back the old file even though the new one was fsynced."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
