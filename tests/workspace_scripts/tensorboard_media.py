"""A plain script using only TensorBoard's SummaryWriter, with no torchyard code: scalars,
images (add_image), matplotlib figures (add_figure), a histogram and, at the end, its
hyperparameters with the final metric (add_hparams)."""

import argparse
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from torch.utils.tensorboard import SummaryWriter  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--optimizer", default="sgd")
    parser.add_argument("--step-sleep", type=float, default=0.0)
    args = parser.parse_args()
    writer = SummaryWriter("runs/media")
    loss = 1.0
    for step in range(args.steps):
        loss *= 1 - args.lr
        writer.add_scalar("Loss/train", loss, step)
        # 3 x 8 x (8 + step): the width tells the steps apart
        writer.add_image("samples", torch.full((3, 8, 8 + step), step / args.steps), step)
        fig = plt.figure(figsize=(2, 1.5), dpi=40)
        plt.plot(range(step + 2), [loss**i for i in range(step + 2)])
        writer.add_figure("plots/decay", fig, step)
        writer.add_histogram("weights", torch.randn(100), step)
        writer.flush()
        time.sleep(args.step_sleep)
    writer.add_hparams(
        {"lr": args.lr, "optimizer": args.optimizer, "steps": args.steps, "nesterov": False},
        {"hparam/final_loss": loss},
    )
    writer.close()
    print(f"done after {args.steps} steps", flush=True)


if __name__ == "__main__":
    main()
