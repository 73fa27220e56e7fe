"""The public in-job SDK for user scripts: ``import torchyard; run = torchyard.init()``.

    run = init(config={"lr": 0.01, "epochs": 5})   # defaults; the run's params override them
    run.seed_everything()
    state = run.load_checkpoint(model, optimizer)  # None on a fresh start
    start = state["epoch"] + 1 if state else 1
    for epoch in range(start, run.config["epochs"] + 1):
        ...
        run.log(step=step, **{"train/loss": loss.item()})
        run.save_checkpoint(model, optimizer, epoch=epoch, step=step)

Inside torchyard ``init()`` returns a handle on the job's context (the one the launcher
built: same reporter, same process group); started by hand (``python script.py``) it is a
no-op twin with the same methods, so the script stays runnable anywhere. Rank-aware with no
code from the user: every rank may call ``log`` (only rank 0 writes) and must call
``save_checkpoint`` (a collective under DDP; only rank 0 writes the file).

Imports only the standard library and torch, like the rest of the in-job code.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from torchyard.runtime.checkpoint import load_optimizer_state, unwrap_model
from torchyard.runtime.context import JobContext, get_context
from torchyard.runtime.seeding import seed_everything

log = logging.getLogger(__name__)

__all__ = ["Run", "init"]


class Run:
    """A script's handle on its run. Build it with ``init()``."""

    def __init__(self, ctx: JobContext, defaults: Mapping[str, Any]) -> None:
        self._ctx = ctx
        # The run's params win over the script's defaults; keys only the script knows stay.
        self.config: dict[str, Any] = {**defaults, **ctx.params}

    # -- who and where -----------------------------------------------------------------

    @property
    def in_torchyard(self) -> bool:
        """False when the script was started by hand: logging and checkpoints do nothing."""
        return self._ctx.run_dir is not None

    @property
    def id(self) -> int | None:
        return self._ctx.run_id

    @property
    def dir(self) -> Path | None:
        """The run directory (the job's working directory), None outside torchyard."""
        return self._ctx.run_dir

    @property
    def seed(self) -> int:
        return self._ctx.seed

    @property
    def deterministic(self) -> bool:
        return self._ctx.deterministic

    @property
    def rank(self) -> int:
        return self._ctx.rank

    @property
    def local_rank(self) -> int:
        return self._ctx.local_rank

    @property
    def world_size(self) -> int:
        return self._ctx.world_size

    @property
    def is_chief(self) -> bool:
        return self._ctx.is_chief

    @property
    def distributed(self) -> bool:
        """True under DDP: the process group is initialised (by torchyard, or by torchrun
        started by hand) and the model should be wrapped in DistributedDataParallel."""
        return self._ctx.distributed

    @property
    def device(self) -> torch.device:
        return self._ctx.device

    @property
    def full_config(self) -> dict[str, Any]:
        """The whole run config (script, args, params, seed, resources)."""
        return dict(self._ctx.config)

    # -- what a training loop calls ----------------------------------------------------

    def seed_everything(self) -> None:
        """Seed random, numpy and torch with the run's seed and set its determinism flags
        (torchyard already did before the script started; calling again is harmless)."""
        seed_everything(self.seed, self.deterministic)

    def log(self, values: Mapping[str, Any] | None = None, /, *, step: int, **metrics: Any) -> None:
        """Report metrics at a global step; never blocks on disk. Keys with a slash go in
        ``values`` or as keywords: ``run.log({"train/loss": x}, step=3)``,
        ``run.log(step=3, **{"train/loss": x})``. Every rank may call it; only rank 0 writes."""
        self._ctx.reporter.log(step, values, **metrics)

    def save_checkpoint(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        epoch: int,
        step: int,
        name: str | None = None,
    ) -> Path | None:
        """Save model (unwrapped from DDP), optimizer, epoch and step as ``name`` (default
        ``epoch-NNNN.pt``). Call it on every rank. Returns the path on rank 0 inside
        torchyard, None elsewhere (and outside torchyard, where nothing is written)."""
        name = name or f"epoch-{epoch:04d}.pt"
        if not self.in_torchyard:
            log.info("not in torchyard: checkpoint %s not written", name)
        return self._ctx.save_checkpoint(name, model, optimizer, epoch, step)

    def load_checkpoint(
        self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None
    ) -> dict[str, Any] | None:
        """When this run resumes another, restore model and optimizer from the checkpoint it
        resumes and return it (``epoch``, ``step``, ...): continue at ``epoch + 1`` and
        ``step + 1``. None on a fresh start. Call it on every rank, before wrapping in DDP
        or after (the unwrapped module is what is loaded). The optimizer keeps the
        hyperparameters it was built with (a resume with another lr trains with it); its
        state (momentum, moments) comes from the checkpoint."""
        state = self._ctx.resume_state()
        if state is None:
            return None
        unwrap_model(model).load_state_dict(state["model"])
        if optimizer is not None and state.get("optimizer") is not None:
            load_optimizer_state(optimizer, state["optimizer"])
        return state

    def finish(self) -> None:
        """Flush every reported point. Optional: torchyard does it when the script ends."""
        self._ctx.reporter.flush()


def json_safe(value: Any, depth: int = 0) -> Any:
    """A config value as JSON holds it: mappings (string keys) and lists as such, a finite
    number, a bool, a string or None; numpy and torch scalars as their Python number, a
    non-finite float as None, anything else (a path, a class) as its text."""
    if depth > 32:
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v, depth + 1) for v in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    item = getattr(value, "item", None)  # numpy scalar, 0-d tensor
    if not isinstance(value, float) and callable(item):
        try:
            value = item()
        except (TypeError, ValueError, RuntimeError):
            return str(value)
        if isinstance(value, bool | int):
            return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return str(value)


def init(config: Mapping[str, Any] | None = None) -> Run:
    """The run this script is part of; ``config`` holds the script's defaults for its params.

    Every key of ``config`` is recorded as the run's params (``params.<key>``, nested keys
    flattened to dots as the launch config's are), beside the launch's; where the launch gave
    a key too, the launch's value is the run's (``run.config``) and the run page says that the
    two differ. Outside torchyard the seed is ``config["seed"]`` when given, else 0.
    """
    defaults = dict(config or {})
    standalone = {"params": defaults, "seed": int(defaults.get("seed", 0))}
    ctx = get_context(default_config=standalone)
    ctx.join_process_group()
    if defaults:
        ctx.reporter.record_config(json_safe(defaults))  # rank 0 only: the others' is a no-op
    return Run(ctx, defaults)
