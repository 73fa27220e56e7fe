"""The job's view of its run: config, rank, reporter and checkpoints, built from the env.

The launcher (directly, or through torchrun) hands the job everything in environment
variables (docs/architecture.md); this module is the one place that reads them, so a recipe
or a user script only ever sees a ``JobContext``. Outside the platform (no run directory)
the same code runs with a no-op reporter and no checkpoint files.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from torchyard.contract import (
    CONFIG_VAR,
    LOG_LINE_PREFIX_VAR,
    RESUME_FROM_VAR,
    RUN_DIR_VAR,
    RUN_ID_VAR,
    RunPaths,
)
from torchyard.runtime import ingest_mark
from torchyard.runtime.checkpoint import load_checkpoint
from torchyard.runtime.checkpoint import save_checkpoint as _save_checkpoint_file
from torchyard.runtime.member_view import member_view
from torchyard.runtime.reporter import Reporter

log = logging.getLogger(__name__)


class JobContext:
    """Everything a training function needs to know about the run it is part of."""

    def __init__(
        self,
        *,
        config: Mapping[str, Any],
        run_id: int | None = None,
        run_dir: str | os.PathLike[str] | None = None,
        rank: int = 0,
        local_rank: int = 0,
        world_size: int = 1,
        resume_from: str | os.PathLike[str] | None = None,
        owns_process_group: bool = False,
    ) -> None:
        self.config: dict[str, Any] = dict(config)
        self.run_id = run_id
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.rank = rank
        self.local_rank = local_rank
        self.world_size = world_size
        self.resume_from = Path(resume_from) if resume_from is not None else None
        self._owns_process_group = owns_process_group
        self._resume_state: dict[str, Any] | None = None
        self._closed = False
        # Only rank 0 reports: every rank sees the same global step, and N copies of each
        # point would only have to be deduplicated downstream.
        # The launcher's bound on the spool's backlog (torchyard.runtime.ingest_mark).
        bounds = ingest_mark.from_env()
        self.reporter = Reporter(
            RunPaths(self.run_dir).metrics if self.run_dir is not None else None,
            enabled=self.is_chief,
            backlog_bytes=bounds.backlog_bytes,
            fresh_seconds=bounds.fresh_seconds,
            max_age_seconds=bounds.max_age_seconds,
        )

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        default_config: Mapping[str, Any] | None = None,
        join_group: bool = True,
    ) -> JobContext:
        """Build the context from the launcher's variables; join the process group when
        ``WORLD_SIZE > 1`` (nccl on CUDA, gloo on CPU). A single process never initialises
        one: it would cost a rendezvous and buy nothing.

        ``default_config`` is the config outside the platform (no run, no config in the
        environment): a script started by hand, alone or under a hand-typed torchrun.
        ``join_group=False`` leaves the process group to the script (torchyard.job, for scripts,
        which may call ``init_process_group`` themselves)."""
        env = os.environ if environ is None else environ
        run_dir = env.get(RUN_DIR_VAR) or None
        run_id = int(env[RUN_ID_VAR]) if env.get(RUN_ID_VAR) else None
        if run_dir is None and not env.get(CONFIG_VAR) and default_config is not None:
            config = dict(default_config)
        else:
            config = _read_config(env, run_dir)
        rank = int(env.get("RANK", "0"))
        local_rank = int(env.get("LOCAL_RANK", "0"))
        world_size = int(env.get("WORLD_SIZE", "1"))
        ctx = cls(
            config=config,
            run_id=run_id,
            run_dir=run_dir,
            rank=rank,
            local_rank=local_rank,
            world_size=world_size,
            resume_from=env.get(RESUME_FROM_VAR) or None,
        )
        if join_group:
            ctx.join_process_group(env)
        return ctx

    def join_process_group(self, environ: Mapping[str, str] | None = None) -> None:
        """Join the default process group when there is more than one rank and nobody has
        yet (a user script may have called ``init_process_group`` itself)."""
        env = os.environ if environ is None else environ
        if torch.cuda.is_available():
            # Before init_process_group: nccl binds each rank to the current device.
            torch.cuda.set_device(self.local_rank)
        if self.world_size > 1 and not dist.is_initialized():
            backend = "nccl" if torch.cuda.is_available() else "gloo"
            hook = sys.excepthook
            dist.init_process_group(backend=backend, rank=self.rank, world_size=self.world_size)
            self._owns_process_group = True
            if env.get(LOG_LINE_PREFIX_VAR):
                # init_process_group installs a hook that prefixes tracebacks with the rank;
                # torchrun prefixes every line already, and twice is noise.
                sys.excepthook = hook

    # -- the config, typed -------------------------------------------------------------

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.config.get("params") or {})

    @property
    def seed(self) -> int:
        return int(self.config.get("seed", 0))

    @property
    def deterministic(self) -> bool:
        return bool(self.config.get("deterministic", False))

    @property
    def is_chief(self) -> bool:
        """Rank 0: the only process that reports metrics and writes checkpoints."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1 and dist.is_available() and dist.is_initialized()

    @property
    def device(self) -> torch.device:
        """This rank's GPU when CUDA is visible (the launcher hides it for ``gpus: 0``)."""
        if torch.cuda.is_available():
            return torch.device("cuda", self.local_rank)
        return torch.device("cpu")

    # -- checkpoints -------------------------------------------------------------------

    def save_checkpoint(
        self,
        name: str,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        epoch: int,
        step: int,
    ) -> Path | None:
        """Save ``checkpoints/<name>`` on the chief and record it in metrics.jsonl.

        Call it on every rank: under DDP it is a collective (barriers before and after),
        so no rank runs ahead while the chief writes and only the chief ever touches the
        file. Returns the path on the chief, None elsewhere or without a run directory.
        """
        _check_name(name)
        if self.distributed:
            dist.barrier()
        path: Path | None = None
        if self.is_chief and self.run_dir is not None:
            path = RunPaths(self.run_dir).checkpoint(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            size = _save_checkpoint_file(
                path,
                model=model,
                optimizer=optimizer,
                epoch=epoch,
                step=step,
                config=self.config,
            )
            # Only now that the file is renamed into place may the forwarder see it.
            self.reporter.record_checkpoint(
                name=name,
                path=RunPaths.checkpoint_path(name),
                epoch=epoch,
                step=step,
                size_bytes=size,
            )
            log.info("saved checkpoint %s (epoch %d, step %d, %d bytes)", name, epoch, step, size)
        if self.distributed:
            dist.barrier()
        return path

    def resume_state(self) -> dict[str, Any] | None:
        """The checkpoint named by ``TORCHYARD_RESUME_FROM`` (loaded once, on CPU), or None."""
        if self.resume_from is None:
            return None
        if self._resume_state is None:
            self._resume_state = load_checkpoint(self.resume_from)
            log.info(
                "resuming from %s (epoch %d, step %d)",
                member_view(str(self.resume_from)),
                self._resume_state["epoch"],
                self._resume_state["step"],
            )
        return self._resume_state

    # -- teardown ----------------------------------------------------------------------

    def close(self) -> None:
        """Drain the reporter (raising its error, if any) and leave the process group."""
        if self._closed:
            return
        self._closed = True
        try:
            self.reporter.close()
        finally:
            if self._owns_process_group and dist.is_initialized():
                dist.destroy_process_group()


def _read_config(env: Mapping[str, str], run_dir: str | None) -> dict[str, Any]:
    raw = env.get(CONFIG_VAR)
    if raw:
        config = json.loads(raw)
    elif run_dir is not None and RunPaths(Path(run_dir)).config.is_file():
        config = json.loads(RunPaths(Path(run_dir)).config.read_text(encoding="utf-8"))
    else:
        raise RuntimeError(
            "TORCHYARD_CONFIG is not set (and there is no config.json in TORCHYARD_RUN_DIR):"
            " the launcher passes the run's config there"
        )
    if not isinstance(config, dict):
        raise RuntimeError(f"TORCHYARD_CONFIG must be a JSON object, got {type(config).__name__}")
    return config


def _check_name(name: str) -> None:
    """Checkpoint names are plain file names: the API serves files by name from the run's
    checkpoints directory and must never be steered outside it."""
    if not name or name in {".", ".."} or Path(name).name != name or "\\" in name:
        raise ValueError(f"checkpoint name must be a plain file name, got {name!r}")


_current: JobContext | None = None


def get_context(
    *, default_config: Mapping[str, Any] | None = None, join_group: bool = True
) -> JobContext:
    """The process's context, built from the environment on first use.

    ``python -m torchyard.job`` creates it before the recipe or script runs, so a user
    script that calls this gets the same reporter instead of opening a second writer on
    the same file.
    """
    global _current
    if _current is None or _current._closed:
        _current = JobContext.from_env(default_config=default_config, join_group=join_group)
    return _current
