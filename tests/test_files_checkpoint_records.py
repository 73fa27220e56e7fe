"""Checkpoint retention: the policy's choice (app.runs.files.checkpoint_records.kept) and the
config's 422s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.db import session_scope
from app.runs.files.checkpoint_records import Candidate, Policy, kept, policy_of
from app.runs.models import Run
from app.runs.service import checkpoints_of
from app.settings import get_settings
from tests.factories import make_run
from tests.test_artifacts import PAYLOAD, checkpoint_line, drain, uris
from worker.forwarder import forward


def _ckpts(n: int) -> list[Candidate]:
    made = [
        Candidate(i, f"epoch-{i:04d}.pt", i * 10, f"checkpoints/epoch-{i:04d}.pt", None)
        for i in range(1, n + 1)
    ]
    return [*made, Candidate(n + 1, "final.pt", n * 10, "checkpoints/final.pt", None)]


def test_keeps_the_last_two_the_best_and_final() -> None:
    ckpts = _ckpts(6)
    values: dict[int, float | None] = {1: 0.2, 2: 0.9, 3: 0.5, 4: 0.4, 5: 0.3, 6: 0.1, 7: 0.1}
    assert kept(ckpts, Policy(2, 1, "val/acc", "max"), values) == {2, 5, 6, 7}
    assert kept(ckpts, Policy(2, 1, "val/loss", "min"), values) == {5, 6, 7}  # best is 6
    assert kept(ckpts, Policy(1, 2, "val/acc", "max"), values) == {2, 3, 6, 7}


def test_without_a_metric_only_the_last_and_final_stay() -> None:
    ckpts = _ckpts(5)
    assert kept(ckpts, Policy(2, 1, None, "max"), {}) == {4, 5, 6}


def test_a_checkpoint_without_a_finite_value_is_never_the_best() -> None:
    ckpts = _ckpts(4)
    values = {1: float("nan"), 2: None, 3: 0.1, 4: 0.2}
    assert kept(ckpts, Policy(1, 1, "m", "min"), values) == {3, 4, 5}


def test_a_config_from_before_the_policy_gets_the_default() -> None:
    assert policy_of({"recipe": "tiny_mlp"}) == Policy(2, 1, None, "max")


def test_the_config_default_is_the_latest_two_and_the_best_one(client, user_headers) -> None:
    r = client.post(
        "/api/experiments",
        json={"name": "ret", "config": {"recipe": "tiny_mlp"}},
        headers=user_headers,
    )
    assert r.status_code == 201, r.text
    assert r.json()["config"]["checkpoints"] == {
        "keep_last": 2,
        "keep_best": 1,
        "metric": None,
        "mode": "max",
    }


def test_a_bad_retention_config_is_a_clear_422(client, user_headers) -> None:
    for bad, loc, words in (
        ({"keep_last": 0}, "keep_last", "greater than or equal to 1"),
        ({"keep_best": -1}, "keep_best", "greater than or equal to 0"),
        ({"mode": "avg"}, "mode", "'max' or 'min'"),
        ({"metric": ""}, "metric", "at least 1 character"),
        ({"keep_every": 3}, "keep_every", "unknown key 'keep_every': did you mean keep_best?"),
    ):
        config = {"recipe": "tiny_mlp", "checkpoints": bad}
        r = client.post(
            "/api/experiments", json={"name": "ret", "config": config}, headers=user_headers
        )
        assert r.status_code == 422, (bad, r.text)
        errors = r.json()["detail"]
        assert any(e["loc"][-1] == loc and words in e["msg"] for e in errors), (bad, errors)
        assert all("checkpoints" in e["loc"] for e in errors)


def _checkpoint_line(epoch: int) -> str:
    return json.dumps(
        {
            "type": "checkpoint",
            "name": f"epoch-{epoch:04d}.pt",
            "path": f"checkpoints/epoch-{epoch:04d}.pt",
            "epoch": epoch,
            "step": epoch * 10,
            "size_bytes": 4,
            "time": 1.0,
        }
    )


def _metrics_line(step: int, acc: float) -> str:
    return json.dumps({"type": "metrics", "step": step, "time": 1.0, "values": {"val/acc": acc}})


def test_the_forwarder_drops_files_and_rows_but_keeps_what_a_resume_reads(
    tmp_path: Path,
) -> None:
    config = {"checkpoints": {"keep_last": 1, "keep_best": 1, "metric": "val/acc"}}
    run_id = make_run(config=config, status="running")
    reader = make_run(status="queued")
    with session_scope() as session:
        row = session.get(Run, reader)
        assert row is not None
        row.resume_from = f"{run_id}/checkpoints/epoch-0002.pt"
    run_dir = get_settings().run_dir(run_id)
    (run_dir / "checkpoints").mkdir(parents=True)
    outside = tmp_path / "not-the-runs.txt"
    outside.write_text("keep me")
    (run_dir / "checkpoints" / "epoch-0001.pt").symlink_to(outside)  # the job's trick
    for epoch in (2, 3, 4, 5):
        (run_dir / "checkpoints" / f"epoch-{epoch:04d}.pt").write_bytes(b"ckpt")
    lines = []
    for epoch, acc in ((1, 0.1), (2, 0.2), (3, 0.9), (4, 0.3), (5, 0.4)):
        lines += [_metrics_line(epoch * 10, acc), _checkpoint_line(epoch)]
    spool = run_dir / "metrics.jsonl"
    spool.write_text("\n".join(lines) + "\n")

    with session_scope() as session:
        forward(session, run_id=run_id, metrics_path=spool)

    # epoch 5: the last; epoch 3: the best val/acc; epoch 2: a queued run resumes from it.
    expected = ["epoch-0002.pt", "epoch-0003.pt", "epoch-0005.pt"]
    with session_scope() as session:
        assert [c.name for c in checkpoints_of(session, run_id=run_id)] == expected
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == expected
    assert outside.read_text() == "keep me"  # the link went, not what it pointed to


def test_dropped_checkpoints_leave_the_artifact_store_too_even_mid_upload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    monkeypatch.setattr(get_settings(), "artifact_store", str(store))
    run_id = make_run(config={"checkpoints": {"keep_last": 1, "keep_best": 0}})
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    big = PAYLOAD * 2000  # 34 MB: still moving when the next batch drops it
    for name in ("epoch-0001.pt", "epoch-0002.pt", "epoch-0003.pt"):
        (run_dir / "checkpoints" / name).write_bytes(big if name == "epoch-0001.pt" else PAYLOAD)
    spool = run_dir / "metrics.jsonl"
    spool.write_text(checkpoint_line("epoch-0001.pt", 10) + "\n")
    with session_scope() as session:  # epoch 1 recorded, its upload starts
        forward(session, run_id=run_id, metrics_path=spool)
    drain(run_id, run_dir)  # epoch 1 is in the store now, its URI recorded
    with spool.open("a") as f:
        f.write(checkpoint_line("epoch-0002.pt", 20) + "\n")
    with session_scope() as session:  # epoch 2 recorded; epoch 1 dropped; 2 starts uploading
        forward(session, run_id=run_id, metrics_path=spool)
    with spool.open("a") as f:
        f.write(checkpoint_line("epoch-0003.pt", 30) + "\n")
    drain(run_id, run_dir)  # epoch 2 dropped, maybe while its upload was in flight

    assert set(uris(run_id)) == {"epoch-0003.pt"}
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["epoch-0003.pt"]
    stored = store / "runs" / str(run_id) / "checkpoints"
    assert sorted(p.name for p in stored.iterdir() if not p.name.startswith(".")) == [
        "epoch-0003.pt"
    ]
