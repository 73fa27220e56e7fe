"""`torchyard import tensorboard` from log dirs written by torch's own `SummaryWriter` in the
test: one run per folder of event files, every scalar point (step, value, wall time) equal to
what TensorBoard's own EventAccumulator reads, hparams as params, images counted and said, a
truncated event file named with the points before the cut imported, a second import adding
nothing."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from mlflow.tracking import MlflowClient
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from tests.mlflow_server import imported_runs, importer_token, torchyard_server  # noqa: F401
from torchyard.cli import main
from torchyard.cli.importers.sink import RUN_ID_TAG

pytestmark = pytest.mark.slow
STEPS = 300


def write_logs(root: Path) -> None:
    for name, lr in (("baseline", 0.1), ("wide/lr-0.01", 0.01)):
        with SummaryWriter(str(root / name)) as writer:
            for step in range(STEPS):
                writer.add_scalar("train/loss", 1.0 / (1 + lr * step), step)
                if step % 10 == 0:
                    writer.add_scalar("val/acc", step / STEPS, step)
            writer.add_image("samples", torch.zeros(3, 4, 4), 0)
            writer.add_hparams({"lr": lr, "optimizer": "adam", "layers": 3}, {"hp/acc": 0.5},
                               run_name="hparams")  # fmt: skip


def source_points(folder: Path) -> dict[str, list[tuple[int, float, int]]]:
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    return {
        tag: [(e.step, e.value, round(e.wall_time * 1000)) for e in events.Scalars(tag)]
        for tag in events.Tags()["scalars"]
    }


def imported(server: str, experiment: str) -> dict[str, Any]:
    return imported_runs(server, experiment, RUN_ID_TAG)


def test_every_scalar_and_hparam_comes_in_once(
    server: str, token: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "logs"
    write_logs(root)
    into = f"tb-{secrets.token_hex(3)}"
    argv = ["import", "tensorboard", str(root), "-e", into, "--server", server, "--token", token]
    assert main(argv) == 0
    said = capsys.readouterr().err
    assert (
        "imported 4 runs" in said and f"not imported: {root / 'baseline'}: 1 image values" in said
    )
    copy = imported(server, into)
    assert sorted(copy) == ["baseline", "baseline/hparams", "wide/lr-0.01", "wide/lr-0.01/hparams"]
    client = MlflowClient(tracking_uri=server)
    for folder, run in copy.items():
        want = source_points(root / folder)
        assert want
        for key, points in want.items():
            history = client.get_metric_history(run.info.run_id, key)
            assert sorted((m.step, m.value, m.timestamp) for m in history) == points
    assert len(source_points(root / "baseline")["train/loss"]) == STEPS
    assert copy["wide/lr-0.01/hparams"].data.params == {
        "lr": "0.01", "optimizer": "adam", "layers": "3"
    }  # fmt: skip
    assert copy["baseline"].data.tags["imported"] == "tensorboard"
    headers = {"Authorization": f"Bearer {token}"}
    run = httpx.get(f"{server}/api/runs/{copy['baseline'].info.run_id}", headers=headers).json()
    assert "imported=tensorboard" in run["tags"]  # the run page's tag badges
    assert run["params"]["tags.torchyard.import.source"] == str(root)
    assert run["params"]["tags.torchyard.import.run_id"] == "baseline"

    assert main(argv) == 0
    assert "4 runs were imported before" in capsys.readouterr().err
    assert len(imported(server, into)) == 4


def test_a_truncated_event_file_is_named_and_the_points_before_it_come_in(
    server: str, token: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "logs"
    write_logs(root)
    (event_file,) = (root / "baseline").glob("events.out.tfevents.*")
    data = event_file.read_bytes()
    event_file.write_bytes(data[: len(data) * 2 // 3])  # the writer killed mid-file
    into = f"tb-cut-{secrets.token_hex(3)}"
    argv = ["import", "tensorboard", str(root), "-e", into, "--server", server, "--token", token]
    assert main(argv) == 1
    said = capsys.readouterr().err
    assert f"skipped: {event_file}: truncated record" in said and " at byte " in said
    assert "imported 4 runs" in said
    copy = imported(server, into)
    want = source_points(root / "baseline")  # TensorBoard's reader stops at the cut too
    history = MlflowClient(tracking_uri=server).get_metric_history(
        copy["baseline"].info.run_id, "train/loss"
    )
    got = sorted((m.step, m.value, m.timestamp) for m in history)
    assert 0 < len(got) < STEPS and got == want["train/loss"]
