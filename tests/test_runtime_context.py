"""JobContext: what the job reads from the launcher's environment, and chief-only writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from torchyard.runtime.checkpoint import load_checkpoint, save_checkpoint
from torchyard.runtime.context import JobContext

CONFIG = {
    "recipe": "tiny_mlp",
    "params": {"epochs": 2},
    "seed": 42,
    "deterministic": True,
    "resources": {"gpus": 0, "nproc": 1},
}


def env_for(run_dir: Path | None, **extra: str) -> dict[str, str]:
    env = {
        "TORCHYARD_RUN_ID": "7",
        "TORCHYARD_CONFIG": json.dumps(CONFIG),
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
    }
    if run_dir is not None:
        env["TORCHYARD_RUN_DIR"] = str(run_dir)
    return {**env, **extra}


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_context_reads_the_launchers_environment(tmp_path: Path) -> None:
    ctx = JobContext.from_env(env_for(tmp_path))
    try:
        assert ctx.run_id == 7 and ctx.run_dir == tmp_path
        assert ctx.config == CONFIG and ctx.params == {"epochs": 2}
        assert ctx.seed == 42 and ctx.deterministic is True
        assert (ctx.rank, ctx.world_size, ctx.is_chief, ctx.distributed) == (0, 1, True, False)
        assert ctx.device == torch.device("cpu") or torch.cuda.is_available()
        assert ctx.reporter.enabled and ctx.reporter.path == tmp_path / "metrics.jsonl"
        assert ctx.resume_state() is None
    finally:
        ctx.close()


def test_chief_checkpoint_lands_in_the_run_dir_and_is_recorded_after_its_metrics(
    tmp_path: Path,
) -> None:
    ctx = JobContext.from_env(env_for(tmp_path))
    model = nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ctx.reporter.log(5, {"train/loss": 0.5})
    path = ctx.save_checkpoint("epoch-0001.pt", model, optimizer, 1, 5)
    ctx.close()
    assert path == tmp_path / "checkpoints" / "epoch-0001.pt"
    first, second = lines(tmp_path / "metrics.jsonl")
    assert first["type"] == "metrics"
    assert second == {
        **second,
        "type": "checkpoint",
        "name": "epoch-0001.pt",
        "path": "checkpoints/epoch-0001.pt",
        "epoch": 1,
        "step": 5,
        "size_bytes": path.stat().st_size,
    }
    state = load_checkpoint(path)
    assert state["config"] == CONFIG and (state["epoch"], state["step"]) == (1, 5)


def test_other_ranks_neither_report_nor_write_checkpoints(tmp_path: Path) -> None:
    ctx = JobContext(config=CONFIG, run_dir=tmp_path, rank=1, world_size=2)
    assert not ctx.is_chief and not ctx.reporter.enabled
    ctx.reporter.log(1, loss=1.0)
    assert ctx.save_checkpoint("final.pt", nn.Linear(2, 2), None, 1, 1) is None
    ctx.close()
    assert list(tmp_path.iterdir()) == []


def test_without_a_run_dir_everything_is_a_no_op(tmp_path: Path) -> None:
    ctx = JobContext.from_env(env_for(None))
    assert not ctx.reporter.enabled
    ctx.reporter.log(1, loss=1.0)
    assert ctx.save_checkpoint("final.pt", nn.Linear(2, 2), None, 1, 1) is None
    ctx.close()


@pytest.mark.parametrize("name", ["", ".", "..", "../escape.pt", "sub/x.pt", "/abs.pt", "a\\b.pt"])
def test_checkpoint_names_must_stay_inside_the_checkpoints_dir(tmp_path: Path, name: str) -> None:
    ctx = JobContext(config=CONFIG, run_dir=tmp_path)
    with pytest.raises(ValueError, match="plain file name"):
        ctx.save_checkpoint(name, nn.Linear(2, 2), None, 1, 1)
    ctx.close()
    assert not (tmp_path / "checkpoints").exists()


def test_resume_state_loads_the_named_checkpoint(tmp_path: Path) -> None:
    ckpt = tmp_path / "old.pt"
    model = nn.Linear(3, 2)
    save_checkpoint(ckpt, model=model, optimizer=None, epoch=3, step=60, config=CONFIG)
    ctx = JobContext.from_env(env_for(None, TORCHYARD_RESUME_FROM=str(ckpt)))
    state = ctx.resume_state()
    assert state is not None and (state["epoch"], state["step"]) == (3, 60)
    assert torch.equal(state["model"]["weight"], model.weight)
    assert ctx.resume_state() is state  # loaded once
    ctx.close()


def test_config_falls_back_to_the_run_dirs_config_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    env = env_for(tmp_path)
    del env["TORCHYARD_CONFIG"]
    ctx = JobContext.from_env(env)
    assert ctx.config == CONFIG
    ctx.close()


def test_missing_config_is_a_clear_error() -> None:
    env = env_for(None)
    del env["TORCHYARD_CONFIG"]
    with pytest.raises(RuntimeError, match="TORCHYARD_CONFIG is not set"):
        JobContext.from_env(env)
