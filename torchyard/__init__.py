"""torchyard's in-job package: what runs inside a training job.

    import torchyard
    run = torchyard.init(config={"lr": 0.01})      # defaults; the run's params override them
    run.log({"train/loss": loss}, step=step)

Everything here imports only the standard library, numpy and torch, and torch only when a
job asks for it: the worker (host agent) imports ``torchyard.contract`` and the recipe
catalog without paying for a torch import, so ``import torchyard`` itself stays light.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchyard.sdk import Run

__all__ = ["Run", "init"]


def init(config: Mapping[str, Any] | None = None) -> Run:
    """The run this script is part of (a no-op twin outside torchyard); see torchyard.sdk."""
    from torchyard.sdk import init as _init

    return _init(config)


def __getattr__(name: str) -> Any:
    if name == "Run":
        from torchyard.sdk import Run as _Run

        return _Run
    raise AttributeError(f"module 'torchyard' has no attribute {name!r}")
