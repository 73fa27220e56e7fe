"""The built-in recipes and their parameters, declared with the standard library only.

The API validates configs against this catalog (it builds pydantic models from it) and the
web UI renders forms from it, but neither may import torch; the job imports the recipe's
module by the dotted name given here. Keeping the declaration torch-free is why it is a
separate module from the recipes themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Param:
    """One recipe parameter: its type, default and bounds (inclusive ge/le, exclusive gt)."""

    name: str
    kind: type
    default: object
    help: str = ""
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    choices: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Recipe:
    name: str
    module: str
    description: str
    params: tuple[Param, ...] = field(default_factory=tuple)

    def defaults(self) -> dict[str, object]:
        return {p.name: p.default for p in self.params}


# What every built-in recipe logs (torchyard.recipes.training): train/* per step, val/* and
# epoch at the step that ends each epoch. A sweep's metric on a recipe must be one of them.
METRIC_KEYS = ("train/loss", "train/acc", "val/loss", "val/acc", "epoch")

_COMMON_TRAINING = (
    Param("epochs", int, 10, "passes over the training split", ge=1, le=100_000),
    Param(
        "batch_size", int, 64, "global batch size (split across ranks under DDP)", ge=1, le=65_536
    ),
    Param("lr", float, 1e-3, "learning rate", gt=0.0, le=10.0),
    Param("optimizer", str, "adam", "optimizer", choices=("sgd", "adam", "adamw")),
    Param("momentum", float, 0.9, "momentum (sgd only)", ge=0.0, le=1.0),
    Param("weight_decay", float, 0.0, "weight decay applied by the optimizer", ge=0.0, le=1.0),
    Param("num_workers", int, 0, "DataLoader worker processes", ge=0, le=64),
)

RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            name="digits_cnn",
            module="torchyard.recipes.digits_cnn",
            description="Small CNN on the 8x8 handwritten digits (1,797 images, UCI).",
            params=(
                *_COMMON_TRAINING,
                Param(
                    "val_fraction",
                    float,
                    0.2,
                    "share of images held out for validation",
                    gt=0.0,
                    le=0.5,
                ),
            ),
        ),
        Recipe(
            name="tiny_mlp",
            module="torchyard.recipes.tiny_mlp",
            description="Tiny MLP on generated data; fast, for smoke tests and demos.",
            params=(
                Param("epochs", int, 3, "passes over the training split", ge=1, le=100_000),
                Param("steps_per_epoch", int, 20, "optimizer steps per epoch", ge=1, le=10_000_000),
                Param(
                    "batch_size",
                    int,
                    32,
                    "global batch size (split across ranks under DDP)",
                    ge=1,
                    le=65_536,
                ),
                Param("lr", float, 0.05, "learning rate", gt=0.0, le=10.0),
                Param("optimizer", str, "sgd", "optimizer", choices=("sgd", "adam", "adamw")),
                Param("momentum", float, 0.9, "momentum (sgd only)", ge=0.0, le=1.0),
                Param("weight_decay", float, 0.0, "weight decay", ge=0.0, le=1.0),
                Param("num_workers", int, 0, "DataLoader worker processes", ge=0, le=64),
                Param(
                    "step_sleep",
                    float,
                    0.0,
                    "seconds to sleep per step (slows a demo)",
                    ge=0.0,
                    le=60.0,
                ),
                Param("fail_at_step", int, 0, "raise an error at this step (0: never)", ge=0),
            ),
        ),
    )
}
