"""The built-in recipes, trained for real: accuracy, reproducibility, resume, failure, cancel.

The slower end-to-end checks start ``python -m torchyard.job`` the way the launcher does
(which also tests the entry point); the rest run the same ``jobmain.run`` in-process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from app.experiments.config.model import run_config
from tests.waits import wait_for
from torchyard import job as jobmain
from torchyard.recipes import digits_cnn, tiny_mlp
from torchyard.recipes.digits_data import load_digits
from torchyard.runtime.checkpoint import load_checkpoint
from torchyard.runtime.context import JobContext
from worker.launcher import Launch, LaunchSpec, build_launch

REPO = Path(__file__).resolve().parent.parent


pytestmark = pytest.mark.usefixtures("restore_torch_state")


def job_launch(
    run_dir: Path,
    config: dict[str, Any],
    resume_from: Path | None = None,
    *,
    script: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> Launch:
    """What the worker would start for this config (the one launcher, not a copy of it); a
    `script` runs from its own directory as the workspace."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")}
    spec = LaunchSpec(
        run_id=1,
        run_dir=run_dir,
        config=run_config({"seed": 0, **config}),
        python=sys.executable,
        job_token="test",
        master_port=29500,
        resume_from=resume_from,
        base_env={**base, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **(extra_env or {})},
        script=script,
        workspace=script.parent if script is not None else None,
    )
    return build_launch(spec)


def job_env(run_dir: Path, config: dict[str, Any], resume_from: Path | None = None) -> dict:
    return job_launch(run_dir, config, resume_from).env


def run_in_process(
    tmp_path: Path, name: str, config: dict[str, Any], resume_from: Path | None = None
) -> Path:
    run_dir = tmp_path / name
    run_dir.mkdir()
    ctx = JobContext.from_env(job_env(run_dir, config, resume_from))
    try:
        jobmain.run(ctx)
    finally:
        ctx.close()
    return run_dir


def start_job(tmp_path: Path, name: str, config: dict[str, Any]) -> tuple[Path, subprocess.Popen]:
    run_dir = tmp_path / name
    run_dir.mkdir()
    launch = job_launch(run_dir, config)
    proc = subprocess.Popen(
        launch.argv,
        cwd=run_dir,
        env=launch.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return run_dir, proc


def run_subprocess(tmp_path: Path, name: str, config: dict[str, Any]) -> tuple[Path, Any]:
    run_dir, proc = start_job(tmp_path, name, config)
    stdout, stderr = proc.communicate(timeout=300)
    return run_dir, subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def spool(run_dir: Path) -> list[dict]:
    text = (run_dir / "metrics.jsonl").read_text()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def series(run_dir: Path, key: str) -> tuple[list[int], list[float]]:
    points = [
        (x["step"], x["values"][key])
        for x in spool(run_dir)
        if x["type"] == "metrics" and key in x["values"]
    ]
    return [s for s, _ in points], [v for _, v in points]


def checkpoints(run_dir: Path) -> list[dict]:
    return [x for x in spool(run_dir) if x["type"] == "checkpoint"]


DIGITS = {"recipe": "digits_cnn", "params": {}, "seed": 1029, "deterministic": True}
TINY = {
    "recipe": "tiny_mlp",
    "params": {"epochs": 3, "steps_per_epoch": 20},
    "seed": 5,
    "deterministic": True,
}


# -- digits_cnn ------------------------------------------------------------------------


def test_digits_cnn_defaults_reach_97_percent_through_jobmain(tmp_path: Path) -> None:
    started = time.monotonic()
    run_dir, result = run_subprocess(tmp_path, "digits", DIGITS)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""  # the job logs, it does not print
    assert "[rank 0] INFO torchyard.job: run 1: recipe digits_cnn, seed 1029" in result.stderr

    steps, losses = series(run_dir, "train/loss")
    assert steps == list(range(1, 231))  # 10 epochs x ceil(1438 / 64) steps, from 1
    assert all(loss is not None for loss in losses)
    assert series(run_dir, "train/acc")[0] == steps
    val_steps, val_acc = series(run_dir, "val/acc")
    assert val_steps == [23 * e for e in range(1, 11)]  # the step that ends each epoch
    assert series(run_dir, "val/loss")[0] == val_steps
    assert series(run_dir, "epoch") == (val_steps, [float(e) for e in range(1, 11)])
    assert val_acc[-1] >= 0.97, val_acc
    assert losses[-1] < losses[0] / 5

    ckpts = checkpoints(run_dir)
    assert [c["name"] for c in ckpts] == [f"epoch-{e:04d}.pt" for e in range(1, 11)] + ["final.pt"]
    for ckpt in ckpts:
        path = run_dir / ckpt["path"]
        assert ckpt["path"] == f"checkpoints/{ckpt['name']}"
        assert ckpt["size_bytes"] == path.stat().st_size
    final = load_checkpoint(run_dir / "checkpoints" / "final.pt")
    # The job's config is the stored one, every default filled in by the model.
    assert (final["epoch"], final["step"]) == (10, 230)
    assert final["config"] == run_config(DIGITS).stored()
    model = digits_cnn.build_model()
    model.load_state_dict(final["model"])
    *_, x_val, y_val = digits_cnn.load_split(1029, 0.2)
    assert digits_cnn.evaluate(model, x_val, y_val)[1] == pytest.approx(val_acc[-1], abs=1e-12)
    print(f"digits_cnn seed 1029: val/acc {val_acc[-1]:.4f} in {elapsed:.1f} s wall")


def test_digits_are_read_from_the_csv_the_package_ships() -> None:
    images, labels = load_digits()
    assert images.shape == (1797, 1, 8, 8) and labels.shape == (1797,)
    assert images.min() == 0.0 and images.max() == 1.0
    assert sorted(set(labels.tolist())) == list(range(10))


def test_split_is_fixed_by_the_seed() -> None:
    a = digits_cnn.load_split(1029, 0.2)
    b = digits_cnn.load_split(1029, 0.2)
    c = digits_cnn.load_split(1030, 0.2)
    assert [len(t) for t in a] == [1438, 1438, 359, 359]
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[2], c[2])
    assert a[0].dtype == torch.float32 and a[1].dtype == torch.int64
    assert a[0].shape[1:] == (1, 8, 8)
    # Train and val together are the whole data set: compare per-image ink, sorted.
    ink = torch.cat([a[0], a[2]]).flatten(1).sum(1).sort().values
    assert torch.allclose(
        ink, torch.tensor(load_digits()[0].reshape(1797, 64).sum(1)).sort().values
    )


def test_evaluate_averages_loss_per_sample_over_the_whole_split() -> None:
    torch.manual_seed(0)
    model = digits_cnn.build_model()
    *_, x_val, y_val = digits_cnn.load_split(1, 0.5)
    model.train()
    loss, acc = digits_cnn.evaluate(model, x_val, y_val)
    assert model.training  # the caller's mode is restored
    model.eval()
    with torch.no_grad():
        logits = model(x_val)
    assert loss == pytest.approx(F.cross_entropy(logits, y_val).item(), rel=1e-5)
    assert acc == pytest.approx((logits.argmax(1) == y_val).float().mean().item(), abs=1e-9)


def test_evaluate_is_exact_across_chunks() -> None:
    torch.manual_seed(0)
    model = tiny_mlp.build_model()
    *_, x, y = tiny_mlp.make_data(3, 10, n_val=2500)  # 3 chunks of up to 1024
    loss, acc = tiny_mlp.evaluate(model, x, y)
    model.eval()
    with torch.no_grad():
        logits = model(x)
    assert loss == pytest.approx(F.cross_entropy(logits, y).item(), rel=1e-5)
    assert acc == (logits.argmax(1) == y).sum().item() / 2500


# -- determinism and resume --------------------------------------------------------------


@pytest.mark.parametrize(
    "config", [{**DIGITS, "params": {"epochs": 2}}, TINY], ids=["digits_cnn", "tiny_mlp"]
)
def test_same_seed_gives_the_same_curve_step_for_step(tmp_path: Path, config: dict) -> None:
    a = series(run_in_process(tmp_path, "a", config), "train/loss")
    b = series(run_in_process(tmp_path, "b", config), "train/loss")
    c = series(run_in_process(tmp_path, "c", {**config, "seed": config["seed"] + 1}), "train/loss")
    assert a == b
    assert a[0] == c[0] and a[1] != c[1]


@pytest.mark.parametrize(
    "config", [{**DIGITS, "params": {"epochs": 2}}, TINY], ids=["digits_cnn", "tiny_mlp"]
)
def test_resume_continues_the_curve_exactly(tmp_path: Path, config: dict) -> None:
    epochs = config["params"]["epochs"]
    whole = run_in_process(tmp_path, "whole", config)
    first = run_in_process(
        tmp_path, "first", {**config, "params": {**config["params"], "epochs": 1}}
    )
    resumed = run_in_process(
        tmp_path, "resumed", config, resume_from=first / "checkpoints" / "epoch-0001.pt"
    )

    steps_first, loss_first = series(first, "train/loss")
    steps_resumed, loss_resumed = series(resumed, "train/loss")
    assert steps_resumed[0] == steps_first[-1] + 1  # the curve continues at the next step
    assert (steps_first + steps_resumed, loss_first + loss_resumed) == series(whole, "train/loss")
    assert series(resumed, "val/acc") == (
        series(whole, "val/acc")[0][1:],
        series(whole, "val/acc")[1][1:],
    )
    assert [c["name"] for c in checkpoints(resumed)] == [
        f"epoch-{e:04d}.pt" for e in range(2, epochs + 1)
    ] + ["final.pt"]
    a = load_checkpoint(whole / "checkpoints" / "final.pt")
    b = load_checkpoint(resumed / "checkpoints" / "final.pt")
    assert (a["epoch"], a["step"]) == (b["epoch"], b["step"])
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


# -- tiny_mlp ----------------------------------------------------------------------------


def test_tiny_mlp_reports_like_digits_and_learns(tmp_path: Path) -> None:
    run_dir = run_in_process(tmp_path, "tiny", TINY)
    steps, _ = series(run_dir, "train/loss")
    assert steps == list(range(1, 61)) and series(run_dir, "train/acc")[0] == steps
    assert series(run_dir, "epoch") == ([20, 40, 60], [1.0, 2.0, 3.0])
    assert series(run_dir, "val/loss")[0] == [20, 40, 60]
    assert series(run_dir, "val/acc")[1][-1] > 0.8
    assert [c["name"] for c in checkpoints(run_dir)] == [
        "epoch-0001.pt",
        "epoch-0002.pt",
        "epoch-0003.pt",
        "final.pt",
    ]
    state = load_checkpoint(run_dir / "checkpoints" / "final.pt")
    tiny_mlp.build_model().load_state_dict(state["model"])


def test_tiny_mlp_honours_the_optimizer_params(tmp_path: Path) -> None:
    for optimizer in ("sgd", "adam", "adamw"):
        config = {
            **TINY,
            "params": {
                "epochs": 1,
                "steps_per_epoch": 3,
                "optimizer": optimizer,
                "weight_decay": 0.01,
            },
        }
        state = load_checkpoint(
            run_in_process(tmp_path, optimizer, config) / "checkpoints" / "final.pt"
        )
        group = state["optimizer"]["param_groups"][0]
        assert group["weight_decay"] == 0.01 and group["lr"] == 0.05
        assert ("exp_avg" in state["optimizer"]["state"][0]) == (optimizer != "sgd")


def test_tiny_mlp_step_sleep_slows_each_step(tmp_path: Path) -> None:
    config = {**TINY, "params": {"epochs": 1, "steps_per_epoch": 10, "step_sleep": 0.05}}
    started = time.monotonic()
    run_in_process(tmp_path, "sleepy", config)
    assert time.monotonic() - started >= 0.5


def test_failing_job_exits_non_zero_with_traceback_and_keeps_earlier_points(
    tmp_path: Path,
) -> None:
    config = {**TINY, "params": {"epochs": 1, "steps_per_epoch": 20, "fail_at_step": 5}}
    run_dir, result = run_subprocess(tmp_path, "fails", config)
    assert result.returncode != 0
    assert "Traceback (most recent call last)" in result.stderr
    assert "RuntimeError: tiny_mlp: failing on purpose at step 5" in result.stderr
    assert "[rank 0] ERROR torchyard.job: run failed" in result.stderr
    assert series(run_dir, "train/loss")[0] == [1, 2, 3, 4]


def test_sigterm_stops_the_job_and_flushes_what_it_logged(tmp_path: Path) -> None:
    config = {**TINY, "params": {"epochs": 1, "steps_per_epoch": 100_000, "step_sleep": 0.01}}
    run_dir, proc = start_job(tmp_path, "cancelled", config)
    try:
        spool_path = run_dir / "metrics.jsonl"
        wait_for(
            lambda: spool_path.exists() and spool_path.stat().st_size > 0,
            timeout=60,
            what="the job's first points",
        )
        time.sleep(0.3)  # not a wait: 0.3 s more of logging, more than the writer's buffer
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    steps, _ = series(run_dir, "train/loss")
    # Every point up to the signal reached the file (the loop logs ~100 points a second,
    # so the last 0.3 s alone are more than the writer's 0.15 s buffer).
    assert len(steps) > 1 and steps == list(range(1, len(steps) + 1))


@pytest.mark.slow
def test_two_process_ddp_run_reports_once_from_rank_0(tmp_path: Path) -> None:
    """torchrun, 2 CPU processes on gloo: DistributedSampler shards, eval all-reduced,
    checkpoints written by rank 0 between barriers, one spool line per step."""
    run_dir = tmp_path / "ddp"
    run_dir.mkdir()
    config = {**TINY, "params": {"epochs": 2, "steps_per_epoch": 10}}
    launch = job_launch(run_dir, {**config, "resources": {"nproc": 2, "gpus": 0}})
    result = subprocess.run(
        launch.argv, cwd=run_dir, env=launch.env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    # torchrun labels every line of each rank; the job's log format adds no second label.
    # (Under torchrun a rank's stderr is its stdout: one ordered stream, torchyard.job.)
    output = result.stdout + result.stderr
    assert "[rank0]: " in output and "[rank1]: " in output
    assert "[rank 0]" not in output and "[rank 1]" not in output
    assert "world size 2" in output
    assert series(run_dir, "train/loss")[0] == list(range(1, 21))
    assert series(run_dir, "val/acc")[0] == [10, 20]
    assert [c["name"] for c in checkpoints(run_dir)] == [
        "epoch-0001.pt",
        "epoch-0002.pt",
        "final.pt",
    ]
    state = load_checkpoint(run_dir / "checkpoints" / "final.pt")
    tiny_mlp.build_model().load_state_dict(state["model"])  # no "module." prefix


@pytest.mark.slow
def test_every_line_of_a_rank_carries_its_prefix_tracebacks_included(tmp_path: Path) -> None:
    """Under torchrun a rank's traceback (written by the interpreter, not our logging) reaches
    the combined output with the rank's prefix on each of its lines."""
    run_dir = tmp_path / "ddp-fail"
    run_dir.mkdir()
    config = {**TINY, "params": {"epochs": 1, "steps_per_epoch": 10, "fail_at_step": 3}}
    launch = job_launch(run_dir, {**config, "resources": {"nproc": 2, "gpus": 0}})
    result = subprocess.run(
        launch.argv,
        cwd=run_dir,
        env=launch.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    lines = result.stdout.splitlines()
    # Both ranks fail at step 3, but torchrun may stop the slower one before it prints.
    failed = [r for r in (0, 1) if f"[rank{r}]: Traceback (most recent call last):" in lines]
    assert failed, result.stdout
    for rank in failed:
        prefix = f"[rank{rank}]: "
        mine = [line for line in lines if line.startswith(prefix)]
        start = mine.index(f"{prefix}Traceback (most recent call last):")
        assert f"{prefix}RuntimeError: tiny_mlp: failing on purpose at step 3" in mine[start:]
        assert any(line.startswith(f'{prefix}  File "') for line in mine[start:])
    assert "]: [rank" not in result.stdout  # one label per line, not torch's second one
    # Nothing of a rank's traceback escaped its prefix (bare lines are torchrun's own).
    bare = [line for line in lines if not line.startswith("[rank")]
    assert not any("failing on purpose" in line or "tiny_mlp.py" in line for line in bare), bare
