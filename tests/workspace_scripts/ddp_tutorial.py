"""A DDP training script in the style of the PyTorch DDP tutorial series, with no torchyard
code: torchrun's environment, gloo on CPU, a DistributedSampler with set_epoch, a DDP model,
a snapshot from rank 0, destroy_process_group at the end."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Regression(Dataset):
    def __init__(self, size: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(size, 20, generator=generator)
        self.y = self.x.sum(dim=1, keepdim=True)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


class Trainer:
    def __init__(self, model, loader, optimizer, snapshot: str) -> None:
        self.rank = dist.get_rank()
        self.model = DistributedDataParallel(model)
        self.loader = loader
        self.optimizer = optimizer
        self.snapshot = snapshot

    def _run_batch(self, source, targets) -> float:
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _run_epoch(self, epoch: int) -> None:
        self.loader.sampler.set_epoch(epoch)
        for source, targets in self.loader:
            loss = self._run_batch(source, targets)
        print(f"[GPU{self.rank}] epoch {epoch} loss {loss:.4f}", flush=True)

    def train(self, epochs: int) -> None:
        for epoch in range(epochs):
            self._run_epoch(epoch)
            if self.rank == 0:
                torch.save({"model": self.model.module.state_dict(), "epoch": epoch}, self.snapshot)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    loader = DataLoader(
        Regression(512), batch_size=32, shuffle=False, sampler=DistributedSampler(Regression(512))
    )
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    Trainer(model, loader, optimizer, snapshot=os.path.join(os.getcwd(), "snapshot.pt")).train(
        args.epochs
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
