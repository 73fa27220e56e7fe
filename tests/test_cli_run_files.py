"""`torchyard files` and `download`'s fallback, as a subprocess against the live stack, on a
real Lightning run (unmodified Trainer, its own ModelCheckpoint writing a `.ckpt` the SDK never
recorded): the list marks it, `files RUN PATH` and a folder (.tar.gz) download it, `download`
without a checkpoint recorded takes it, and "no ... yet" is said only while a run may still
write."""

from __future__ import annotations

import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.conftest import WORKSPACE_DIR, wait_for_status
from tests.factories import make_run
from tests.stack import LiveStack
from tests.test_cli import Cli, logged_in_cli

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "workspace_scripts" / "lightning_boring.py"


@pytest.fixture(scope="module")
def cli(live_stack: LiveStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    yield logged_in_cli(live_stack, tmp_path_factory.mktemp("cli-files") / "cli.json")


@pytest.fixture(scope="module")
def lightning_run(live_stack: LiveStack) -> int:
    (WORKSPACE_DIR / "lightning_files").mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPT, WORKSPACE_DIR / "lightning_files" / "train.py")
    config = {"script": "lightning_files/train.py", "args": ["--devices", "1", "--epochs", "1"]}
    with live_stack.admin_client() as api:
        exp = api.post("/api/experiments", json={"name": "lightning-files", "config": config})
        assert exp.status_code == 201, exp.text
        run = api.post(f"/api/experiments/{exp.json()['id']}/runs").json()
        done = wait_for_status(api, run["id"], {"succeeded", "failed", "cancelled"}, timeout=240)
        assert done["status"] == "succeeded", done["error"]
        return int(run["id"])


def test_files_lists_and_downloads_a_lightning_ckpt(
    cli: Cli, lightning_run: int, tmp_path: Path
) -> None:
    listed = cli("files", str(lightning_run))
    assert listed.returncode == 0, listed.stderr
    ckpt = "lightning_logs/version_0/checkpoints/epoch=0-step=16.ckpt"
    line = next(row for row in listed.stdout.splitlines() if ckpt in row)
    assert line.rstrip().endswith("checkpoint")

    got = cli("files", str(lightning_run), ckpt, "-o", str(tmp_path))
    assert got.returncode == 0, got.stderr
    state = torch.load(tmp_path / "epoch=0-step=16.ckpt", weights_only=False)
    assert state["global_step"] == 16 and "layer.weight" in state["state_dict"]

    folder = cli("files", str(lightning_run), "lightning_logs/version_0", "-o", str(tmp_path))
    assert folder.returncode == 0, folder.stderr
    with tarfile.open(tmp_path / "version_0.tar.gz") as tar:
        assert any(name.endswith("epoch=0-step=16.ckpt") for name in tar.getnames())

    missing = cli("files", str(lightning_run), "no/such.pt")
    assert missing.returncode == 1 and "has no file 'no/such.pt'" in missing.stderr


def test_download_without_recorded_checkpoints_takes_the_newest_checkpoint_file(
    cli: Cli, lightning_run: int, tmp_path: Path
) -> None:
    got = cli("download", str(lightning_run), "-o", str(tmp_path))
    assert got.returncode == 0, got.stderr
    assert "epoch=0-step=16.ckpt" in got.stdout
    assert (tmp_path / "epoch=0-step=16.ckpt").stat().st_size > 0


def test_no_yet_once_a_run_has_ended(cli: Cli) -> None:
    ended = make_run(status="succeeded")
    said = cli("download", str(ended))
    assert said.returncode == 1
    assert f"run {ended} has no checkpoints nor checkpoint-like files" in said.stderr
    assert "yet" not in said.stderr
    files = cli("files", str(ended))
    assert files.returncode == 0 and f"run {ended} has no files" in files.stdout
    assert "yet" not in files.stdout
    running = make_run(status="running")
    said = cli("download", str(running))
    assert said.returncode == 1 and "has no checkpoints yet" in said.stderr
