"""A training script written like the PyTorch tutorial classifier: its own model, DataLoader
and SummaryWriter, and not a line of torchyard. torchyard still streams its Loss/train curve.

    python tensorboard_classifier.py --epochs 2 --step-sleep 0.01
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.tensorboard import SummaryWriter

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--step-sleep", type=float, default=0.0)
args = parser.parse_args()

torch.manual_seed(0)
# Stand-in data (the tutorial's CIFAR-10 would need a download): 1,797 random 8x8 images
# labelled by a fixed random linear map, so the loss has something to learn.
images = torch.rand(1797, 64)
labels = (images @ torch.randn(64, 10)).argmax(1)
trainloader = DataLoader(TensorDataset(images, labels), batch_size=64, shuffle=True)

net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
writer = SummaryWriter("runs/digits_experiment_1")

step = 0
for epoch in range(args.epochs):
    for inputs, targets in trainloader:
        optimizer.zero_grad()
        loss = criterion(net(inputs), targets)
        loss.backward()
        optimizer.step()
        step += 1
        writer.add_scalar("Loss/train", loss.item(), step)
        time.sleep(args.step_sleep)
    print(f"epoch {epoch + 1} done, loss {loss.item():.4f}")

writer.close()
print("Finished Training")
