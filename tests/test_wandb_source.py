"""`torchyard import wandb` from offline runs written by the real `wandb` client in offline
mode (in a subprocess, as a training script runs it): config flattened into params, every
logged value at its step, tags, the exit status, wall times inside the run's lifetime; a
second import adds nothing; a truncated run file is named and what is before the cut comes in."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from tests.mlflow_server import imported_runs, importer_token, torchyard_server  # noqa: F401
from torchyard.cli import main
from torchyard.cli.importers.sink import RUN_ID_TAG

pytestmark = pytest.mark.slow
STEPS = 200

SCRIPT = (
    f"STEPS = {STEPS}\n"
    + """
import wandb
for name, lr, code in (("good", 0.1, 0), ("crashed", 0.01, 1)):
    run = wandb.init(project="vision", name=name, tags=["baseline"],
                     config={"lr": lr, "optimizer": {"name": "adam", "betas": [0.9, 0.99]}})
    for step in range(STEPS):
        row = {"train/loss": 1.0 / (1 + lr * step)}
        if step % 10 == 0:
            row["val/acc"] = step / STEPS
            row["note"] = "text"
        run.log(row, step=step)
    run.finish(exit_code=code)
"""
)


def write_runs(folder: Path) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env |= {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DIR": str(folder),
            "HOME": str(folder)}  # fmt: skip
    before = time.time()
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=folder,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return before, time.time()


def loss(lr: float, step: int) -> float:
    return 1.0 / (1 + lr * step)


def test_offline_runs_come_in_with_every_value_once(
    server: str, token: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before, after = write_runs(tmp_path)
    into = f"wandb-{secrets.token_hex(3)}"
    argv = ["import", "wandb", str(tmp_path / "wandb"), "-e", into,
            "--server", server, "--token", token]  # fmt: skip
    assert main(argv) == 0
    said = capsys.readouterr().err
    assert f"imported 2 runs ({2 * (STEPS + STEPS // 10):,} points" in said
    assert "20 non-numeric history values not imported" in said
    runs = {r.info.run_name: r for r in imported_runs(server, into, RUN_ID_TAG).values()}
    client = MlflowClient(tracking_uri=server)
    for name, lr, status in (("good", 0.1, "FINISHED"), ("crashed", 0.01, "FAILED")):
        run = client.get_run(runs[name].info.run_id)
        assert run.info.status == status
        assert run.data.params == {
            "lr": str(lr), "optimizer.name": "adam", "optimizer.betas": "[0.9, 0.99]"
        }  # fmt: skip
        assert run.data.tags["wandb.tag.baseline"] == "true"
        history = sorted(
            client.get_metric_history(run.info.run_id, "train/loss"), key=lambda m: m.step
        )
        assert [(m.step, m.value) for m in history] == [(s, loss(lr, s)) for s in range(STEPS)]
        assert all(before * 1000 <= m.timestamp <= after * 1000 for m in history)
        acc = sorted(client.get_metric_history(run.info.run_id, "val/acc"), key=lambda m: m.step)
        assert [(m.step, m.value) for m in acc] == [(s, s / STEPS) for s in range(0, STEPS, 10)]

    assert main(argv) == 0
    assert "2 runs were imported before" in capsys.readouterr().err


def test_a_truncated_run_file_is_named_and_the_rows_before_it_come_in(
    server: str, token: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_runs(tmp_path)
    files = sorted((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 2
    cut = files[0]
    data = cut.read_bytes()
    cut.write_bytes(data[: len(data) // 2])  # the process killed mid-write
    into = f"wandb-cut-{secrets.token_hex(3)}"
    argv = ["import", "wandb", str(tmp_path / "wandb"), "-e", into,
            "--server", server, "--token", token]  # fmt: skip
    assert main(argv) == 1
    said = capsys.readouterr().err
    assert f"skipped: {cut}: truncated record" in said and "imported 2 runs" in said
    runs: dict[str, Any] = imported_runs(server, into, RUN_ID_TAG)
    partial = runs[cut.parent.name.rsplit("-", 1)[1]]  # offline-run-<time>-<run id>
    assert partial.info.status == "KILLED"  # no exit record: the process died
    lr = float(partial.data.params["lr"])
    history = MlflowClient(tracking_uri=server).get_metric_history(
        partial.info.run_id, "train/loss"
    )
    assert 0 < len(history) < STEPS
    got = sorted((m.step, m.value) for m in history)
    assert got == [(s, loss(lr, s)) for s in range(len(history))]
