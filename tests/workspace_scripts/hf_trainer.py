"""A Hugging Face Trainer on a tiny GPT-2 built from a config (no download), with no torchyard
code: report_to tensorboard, logging_steps=1, a checkpoint-N/ folder saved by the Trainer.
``--report-to mlflow`` reports to MLflow instead, with nothing MLflow-specific configured
(tests/test_e2e_mlflow_job.py)."""

import argparse
import time

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments


class RandomTokens(Dataset):
    def __init__(self, length: int, vocab: int, seq: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, vocab, (length, seq), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Slow(TrainerCallback):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN003, ANN201
        time.sleep(self.seconds)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--report-to", default="tensorboard")
    args = parser.parse_args()
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    model = GPT2LMHeadModel(config)
    training = TrainingArguments(
        output_dir="out",
        max_steps=args.steps,
        per_device_train_batch_size=4,
        logging_steps=1,
        save_steps=args.steps // 2,
        report_to=[args.report_to],
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=training,
        train_dataset=RandomTokens(64, 64, 16),
        callbacks=[Slow(args.step_sleep)],
    )
    trainer.train()


if __name__ == "__main__":
    main()
