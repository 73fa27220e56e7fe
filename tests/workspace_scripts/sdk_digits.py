"""A script on the torchyard SDK: DDP when launched with nproc > 1, one report per step,
a checkpoint per epoch, and resume from the checkpoint a resumed run is given. Started by
hand (``python sdk_digits.py``) the same file trains alone and reports nowhere.
"""

import argparse
import time

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from torchyard.recipes.digits_data import load_digits
from torchyard.sdk import init

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--hidden", type=int, default=32)
parser.add_argument("--step-sleep", type=float, default=0.0)
args = parser.parse_args()

run = init(config=vars(args))
run.seed_everything()

images, labels = load_digits()  # the digits torchyard ships, already scaled to [0, 1]
dataset = TensorDataset(torch.tensor(images.reshape(-1, 64).copy()), torch.tensor(labels.copy()))
global_batch = 64
sampler = DistributedSampler(dataset, seed=run.seed, drop_last=True) if run.distributed else None
loader = DataLoader(
    dataset,
    batch_size=global_batch // run.world_size,
    sampler=sampler,
    shuffle=sampler is None,
    drop_last=True,
)

model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
state = run.load_checkpoint(model, optimizer)
start_epoch = state["epoch"] + 1 if state else 1
step = state["step"] if state else 0
if run.distributed:
    model = DistributedDataParallel(model)
criterion = nn.CrossEntropyLoss()

for epoch in range(start_epoch, args.epochs + 1):
    if sampler is not None:
        sampler.set_epoch(epoch)
    for inputs, targets in loader:
        optimizer.zero_grad()
        loss = criterion(model(inputs), targets)
        loss.backward()
        optimizer.step()
        step += 1
        run.log(step=step, **{"train/loss": loss.item(), "epoch": epoch})
        time.sleep(args.step_sleep)
    run.save_checkpoint(model, optimizer, epoch=epoch, step=step)
    print(f"rank {run.rank}: epoch {epoch} done at step {step}")
run.finish()
