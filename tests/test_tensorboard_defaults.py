from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader

from tests.conftest import REPO
from tests.waits import wait_for

LIVE_WRITER = """
import sys, time
from torchyard.runtime.tensorboard_defaults import install
install()
assert "tensorboard" not in sys.modules and "torch.utils.tensorboard" not in sys.modules
from torch.utils.tensorboard import SummaryWriter
writer = SummaryWriter()
writer.add_scalar("Loss/train", 0.5, 7)
print(writer.flush_secs, flush=True)
time.sleep(60)  # no close, no flush: the parent ends this process
"""

EXPLICIT_ARGS = """
import json, sys
from torchyard.runtime.tensorboard_defaults import install
if sys.argv[1] == "before":
    install()
from torch.utils.tensorboard import SummaryWriter
if sys.argv[1] == "after":
    install()  # the module is already loaded: patched on the spot
writers = [
    SummaryWriter(),
    SummaryWriter(log_dir="explicit", flush_secs=30),
    SummaryWriter(None, "", None, 10, 45),
    SummaryWriter(comment="lr0.1"),
]
print(json.dumps([[w.log_dir, w.flush_secs] for w in writers]))
for w in writers:
    w.close()
"""


def child_env(tb_dir: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), TORCHYARD_TENSORBOARD_DIR=str(tb_dir))


def scalars_in(log_dir: Path) -> list[tuple[str, int, float]]:
    found = []
    for path in log_dir.glob("events.out.tfevents.*"):
        for event in LegacyEventFileLoader(str(path)).Load():
            found += [(v.tag, event.step, v.simple_value) for v in event.summary.value]
    return found


def test_a_default_writer_lands_its_scalars_in_the_run_tensorboard_dir_while_alive(
    tmp_path: Path,
) -> None:
    tb_dir = tmp_path / "tensorboard"
    child = subprocess.Popen(
        [sys.executable, "-c", LIVE_WRITER],
        cwd=tmp_path,
        env=child_env(tb_dir),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "1"  # flush_secs, after add_scalar
        wait_for(lambda: scalars_in(tb_dir), timeout=3, every=0.1, what="the scalar on disk")
        assert scalars_in(tb_dir) == [("Loss/train", 7, 0.5)]
        assert child.poll() is None  # still alive: nothing closed or flushed the writer
        assert not (tmp_path / "runs").exists()
    finally:
        child.kill()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()


def test_explicit_arguments_win_whenever_install_runs(tmp_path: Path) -> None:
    tb_dir = tmp_path / "tensorboard"
    for when in ("before", "after"):
        out = subprocess.run(
            [sys.executable, "-c", EXPLICIT_ARGS, when],
            cwd=tmp_path,
            env=child_env(tb_dir),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert json.loads(out) == [
            [str(tb_dir), 1],
            ["explicit", 30],
            [str(tb_dir), 45],
            [str(tb_dir / "lr0.1"), 1],
        ], when


def test_without_the_variable_the_log_dir_is_torchs_default(tmp_path: Path) -> None:
    env = child_env(tmp_path)
    del env["TORCHYARD_TENSORBOARD_DIR"]
    out = subprocess.run(
        [sys.executable, "-c", EXPLICIT_ARGS, "before"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    default, explicit, *_ = json.loads(out)
    assert default[0].startswith("runs/") and default[1] == 1
    assert explicit == ["explicit", 30]
