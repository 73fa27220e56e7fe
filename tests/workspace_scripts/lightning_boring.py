"""A PyTorch Lightning driver around a BoringModel-style module, with no torchyard code: a
random dataset, a linear layer, TensorBoardLogger, DDP on CPU with the devices it is told. Its
hyperparameters reach TensorBoard twice, as Lightning users do: the module's
save_hyperparameters() (logged by the Trainer) and an explicit logger.log_hyperparams().
With ``--logger mlflow`` it logs through Lightning's MLFlowLogger instead, configured as a team
does for `mlflow server` (nothing torchyard-specific: tests/test_e2e_mlflow_job.py)."""

import argparse
import time

import lightning as L
import torch
from lightning.pytorch.loggers import Logger, MLFlowLogger, TensorBoardLogger
from torch.utils.data import DataLoader, Dataset


class RandomDataset(Dataset):
    def __init__(self, size: int, length: int) -> None:
        self.data = torch.randn(length, size, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.data[index]


class BoringModel(L.LightningModule):
    def __init__(self, step_sleep: float = 0.0, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(32, 2)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        loss = self.layer(batch).pow(2).mean()
        self.log("train_loss", loss)
        if self.hparams.step_sleep:
            time.sleep(self.hparams.step_sleep)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.layer.parameters(), lr=self.hparams.lr)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--logger", choices=["tensorboard", "mlflow"], default="tensorboard")
    args = parser.parse_args()
    logger: Logger
    if args.logger == "mlflow":
        logger = MLFlowLogger(experiment_name="lightning_logs", run_name="boring")
    else:
        logger = TensorBoardLogger(save_dir=".", name="lightning_logs")
    logger.log_hyperparams({"batch_size": 4, "optimizer": "sgd", "data": {"size": 32}})
    trainer = L.Trainer(
        accelerator="cpu",
        devices=args.devices,
        strategy="ddp" if args.devices > 1 else "auto",
        max_epochs=args.epochs,
        logger=logger,
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    loader = DataLoader(RandomDataset(32, 64), batch_size=4)
    trainer.fit(BoringModel(args.step_sleep), loader)
    print(f"rank {trainer.global_rank} done after step {trainer.global_step}", flush=True)


if __name__ == "__main__":
    main()
