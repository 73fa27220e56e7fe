"""The multi-node tests' DDP script (tests/test_multi_node.py): a fixed regression set through
a DistributedSampler with set_epoch, DDP over gloo, every step's loss averaged over the ranks
and reported (rank 0 writes), and per epoch whether the ranks' shards, gathered on every rank,
were disjoint and covered the set. ``--fail_rank``/``--fail_step`` make one rank raise;
``--step_sleep`` makes a run long enough to cancel or to lose a node under; ``--checkpoint 1``
saves one after each epoch, and a run that resumes one goes on from its epoch and step;
``--probe host:port,...`` makes every rank try to connect to each first and raise if one
answers (the job network's test); ``--exceed disk`` or ``--exceed memory`` makes ``--fail_rank``
pass the run's limit at ``--fail_step`` instead of raising: it writes 20 MB files into its
folder (up to 1 GB), or holds up to 6 GiB of memory, then holds on."""

import argparse
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from torchyard.sdk import init

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--fail_rank", type=int, default=-1)
parser.add_argument("--fail_step", type=int, default=0)
parser.add_argument("--step_sleep", type=float, default=0.0)
parser.add_argument("--checkpoint", type=int, default=0)  # 1: a checkpoint after each epoch
parser.add_argument("--probe", default="")
parser.add_argument("--exceed", default="", choices=["", "disk", "memory"])
args = parser.parse_args()


def exceed(what: str) -> None:
    """Past the run's limit on this rank; the other ranks wait for it in their next step."""
    print(f"rank {dist.get_rank()} goes past the {what} limit", flush=True)
    if what == "memory":
        # Zero-filled, so touched; bounded (6 GiB) on a box that does not hold the run to it.
        held = [bytearray(32 * 1024**2) for _ in range(192)]
        print(f"rank {dist.get_rank()} holds {len(held) * 32} MiB", flush=True)
        time.sleep(600)
    chunk = os.urandom(1024**2)
    for n in range(50):
        with open(f"fill-{n}.bin", "wb") as f:
            for _ in range(20):
                f.write(chunk)
    time.sleep(600)  # held: only the worker's stop ends it


def probe(targets: str) -> None:
    for target in filter(None, targets.split(",")):
        host, port = target.rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except OSError as exc:
            print(f"probe {target}: not reached ({exc})", flush=True)
            continue
        raise RuntimeError(f"probe {target}: reached")


run = init(config=vars(args))
run.seed_everything()
rank, world = dist.get_rank(), dist.get_world_size()
SIZE = 256
generator = torch.Generator().manual_seed(0)
x = torch.randn(SIZE, 8, generator=generator)
dataset = TensorDataset(torch.arange(SIZE), x, x.sum(dim=1, keepdim=True))
sampler = DistributedSampler(dataset, seed=run.seed, drop_last=True)
loader = DataLoader(dataset, batch_size=32 // world, sampler=sampler, drop_last=True)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
state = run.load_checkpoint(model, optimizer)  # every rank, on every node's host
model = DistributedDataParallel(model)
print(f"rank {rank} of {world} on node {os.environ.get('GROUP_RANK')}", flush=True)
probe(args.probe)

step = state["step"] if state else 0
for epoch in range(state["epoch"] + 1 if state else 0, args.epochs):
    sampler.set_epoch(epoch)
    mine = torch.tensor(list(iter(sampler)))
    shards = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(shards, mine)
    every = torch.cat(shards).tolist()
    disjoint = float(len(set(every)) == len(every) == SIZE)
    for _index, inputs, targets in loader:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        step += 1
        if rank == args.fail_rank and step == args.fail_step and args.exceed:
            exceed(args.exceed)
        if rank == args.fail_rank and step == args.fail_step:
            raise RuntimeError(f"rank {rank} fails on purpose at step {step}")
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        run.log(
            step=step,
            **{"train/loss": mean.item() / world, "world_size": world, "shards_disjoint": disjoint},
        )
        time.sleep(args.step_sleep)
    if args.checkpoint:
        run.save_checkpoint(model, optimizer, epoch=epoch, step=step)
run.finish()
