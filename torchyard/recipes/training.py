"""The training loop the built-in classifier recipes share.

One loop, written once, so every recipe gets the same guarantees the product promises:
optimizer built after the model is on its device, state restored before DDP wraps the
model, ``zero_grad -> forward -> backward -> step``, every epoch re-seeded (resume then
continues the curve exactly), evaluation under ``eval()`` + ``inference_mode()`` with loss
averaged per sample and accuracy over the whole split (all-reduced under DDP), checkpoints
at every epoch end and at the end of training.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from torchyard.runtime.checkpoint import load_optimizer_state
from torchyard.runtime.context import JobContext
from torchyard.runtime.data import make_loader, set_epoch

log = logging.getLogger(__name__)

EVAL_BATCH = 1024


def build_optimizer(
    parameters: Iterable[nn.Parameter],
    *,
    name: str,
    lr: float,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
) -> torch.optim.Optimizer:
    """sgd / adam / adamw. Weight decay goes through the optimizer (decoupled for adamw),
    never as a hand-written penalty added to the loss."""
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(parameters, lr=lr, weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(parameters, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r} (choose sgd, adam or adamw)")


def _eval_sums(model: nn.Module, x: Tensor, y: Tensor) -> tuple[float, float, int]:
    """(summed loss, correct predictions, count) over ``x``, in chunks to bound memory."""
    device = next(model.parameters()).device
    loss_sum = 0.0
    correct = 0.0
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for start in range(0, len(x), EVAL_BATCH):
                inputs = x[start : start + EVAL_BATCH].to(device)
                targets = y[start : start + EVAL_BATCH].to(device)
                logits = model(inputs)
                loss_sum += F.cross_entropy(logits, targets, reduction="sum").item()
                correct += (logits.argmax(dim=1) == targets).sum().item()
    finally:
        model.train(was_training)
    return loss_sum, correct, len(x)


def evaluate(model: nn.Module, x: Tensor, y: Tensor) -> tuple[float, float]:
    """(loss averaged per sample, accuracy over the whole split) of ``model`` on (x, y)."""
    if len(x) == 0:
        raise ValueError("cannot evaluate on an empty split")
    loss_sum, correct, count = _eval_sums(model, x, y)
    return loss_sum / count, correct / count


def evaluate_across_ranks(
    ctx: JobContext, model: nn.Module, x: Tensor, y: Tensor
) -> tuple[float, float]:
    """:func:`evaluate` with the split sharded over ranks and the sums all-reduced, so every
    rank gets the metrics of the whole split at 1/world_size of the cost."""
    if not ctx.distributed:
        return evaluate(model, x, y)
    loss_sum, correct, count = _eval_sums(
        model, x[ctx.rank :: ctx.world_size], y[ctx.rank :: ctx.world_size]
    )
    totals = torch.tensor([loss_sum, correct, float(count)], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(totals, op=dist.ReduceOp.SUM)
    loss_total, correct_total, count_total = totals.tolist()
    return loss_total / count_total, correct_total / count_total


def make_train_loader(
    ctx: JobContext, dataset: Dataset[Any], *, batch_size: int, num_workers: int
) -> DataLoader[Any]:
    """The training loader: shuffled by the run's seed; under DDP a DistributedSampler
    gives each rank its own shard and the global ``batch_size`` is split across ranks."""
    if not ctx.distributed:
        return make_loader(
            dataset,
            batch_size=batch_size,
            shuffle=True,
            seed=ctx.seed,
            num_workers=num_workers,
            persistent_workers=num_workers > 0,
        )
    sampler: DistributedSampler[Any] = DistributedSampler(
        dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=ctx.seed
    )
    return make_loader(
        dataset,
        batch_size=max(1, batch_size // ctx.world_size),
        shuffle=False,
        seed=ctx.seed,
        num_workers=num_workers,
        sampler=sampler,
        persistent_workers=num_workers > 0,
    )


def fit(
    ctx: JobContext,
    model: nn.Module,
    params: Mapping[str, Any],
    *,
    train_set: Dataset[Any],
    x_val: Tensor,
    y_val: Tensor,
    before_step: Callable[[int], None] | None = None,
) -> dict[str, float]:
    """Train ``model`` as ``params`` say, report, checkpoint; return the last logged values.

    ``params`` needs epochs, batch_size, lr, optimizer, momentum, weight_decay and
    num_workers. ``before_step(step)`` runs before each optimizer step (tiny_mlp's sleep
    and deliberate failure hook in there).
    """
    device = ctx.device
    if ctx.distributed and device.type == "cuda":
        # Per-rank batches are 1/world_size of the global one; SyncBatchNorm computes the
        # statistics over the global batch (it has no CPU implementation, hence the guard).
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)  # type: ignore[no-untyped-call]
    model.to(device)
    optimizer = build_optimizer(
        model.parameters(),
        name=str(params["optimizer"]),
        lr=float(params["lr"]),
        momentum=float(params["momentum"]),
        weight_decay=float(params["weight_decay"]),
    )
    done_epochs, step = 0, 0
    state = ctx.resume_state()
    if state is not None:
        model.load_state_dict(state["model"])
        if state.get("optimizer") is not None:
            load_optimizer_state(optimizer, state["optimizer"])
        done_epochs, step = int(state["epoch"]), int(state["step"])
        # The optimizer's own lr after the load: proof in the log that an override took.
        log.info(
            "resumed after epoch %d step %d; optimizer lr %g",
            done_epochs,
            step,
            optimizer.param_groups[0]["lr"],
        )
    train_model: nn.Module = model
    if ctx.distributed:
        device_ids = [device.index] if device.type == "cuda" else None
        train_model = nn.parallel.DistributedDataParallel(model, device_ids=device_ids)
    loader = make_train_loader(
        ctx, train_set, batch_size=int(params["batch_size"]), num_workers=int(params["num_workers"])
    )
    epochs = int(params["epochs"])
    last: dict[str, float] = {}
    for epoch in range(done_epochs + 1, epochs + 1):
        set_epoch(loader, epoch, seed=ctx.seed)
        train_model.train()
        batches = len(loader)
        for index, (inputs, targets) in enumerate(loader, start=1):
            step += 1
            if before_step is not None:
                before_step(step)
            inputs = inputs.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            logits = train_model(inputs)
            loss = F.cross_entropy(logits, targets)
            loss.backward()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
            optimizer.step()
            # Counted in integers and divided in Python: exact, unlike a float32 mean.
            correct = (logits.detach().argmax(dim=1) == targets).sum().item()
            values = {"train/loss": loss.item(), "train/acc": correct / targets.numel()}
            if index == batches:
                val_loss, val_acc = evaluate_across_ranks(ctx, model, x_val, y_val)
                values.update({"val/loss": val_loss, "val/acc": val_acc, "epoch": epoch})
            ctx.reporter.log(step, values)
            last = values
        if ctx.is_chief:
            log.info(
                "epoch %d/%d step %d: train/loss %.4f val/loss %.4f val/acc %.4f",
                epoch,
                epochs,
                step,
                last["train/loss"],
                last["val/loss"],
                last["val/acc"],
            )
        ctx.save_checkpoint(f"epoch-{epoch:04d}.pt", model, optimizer, epoch, step)
    ctx.save_checkpoint("final.pt", model, optimizer, max(epochs, done_epochs), step)
    return last
