"""`torchyard edit` (name, tags, notes) and `torchyard ls` with tag, filter and sort, as a
subprocess against the suite's live server (runs and points written straight to its database:
no job needs to run for this)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.db import session_scope
from app.metrics.ingest import ingest_points
from app.runs.files import log_store
from app.runs.query.params import record_config
from tests.factories import make_run
from tests.stack import LiveStack
from tests.test_cli import Cli, logged_in_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cli(live_stack: LiveStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    yield logged_in_cli(live_stack, tmp_path_factory.mktemp("cli-runs") / "cli.json")


def test_edit_sets_name_tags_notes_and_ls_filters_and_sorts_by_them(cli: Cli) -> None:
    tag = f"cli-{secrets.token_hex(3)}"
    runs = []
    for lr, acc in [(0.001, 0.9), (0.1, 0.7), (0.05, 0.8)]:
        config = {"recipe": "tiny_mlp", "params": {"lr": lr}, "seed": 1}
        run_id = make_run(config=config, status="succeeded")
        with session_scope() as session:
            record_config(session, run_id=run_id, config=config)
            ingest_points(session, run_id=run_id, points=[("val/acc", 3, acc, 1.0)])
        runs.append(run_id)
    for run_id in runs:
        done = cli("edit", str(run_id), "--tag", tag, "--tag", "sweep")
        assert done.returncode == 0, done.stderr
    named = cli("edit", str(runs[2]), "--name", "the best", "--notes", "-", stdin="warmup\n")
    assert named.returncode == 0, named.stderr
    assert f"run {runs[2]}: name the best; tags {tag}, sweep" in named.stdout

    listed = cli(
        "ls", "--json", "--tag", tag, "--sort", "-summary.val/acc.max",
        "--filter", "params.params.lr>0.01",
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    got = json.loads(listed.stdout)
    assert [r["id"] for r in got] == [runs[2], runs[1]]
    assert got[0]["name"] == "the best" and got[0]["notes"] == "warmup\n"
    assert got[0]["summary"]["val/acc"]["max"] == 0.8

    cleared = cli("edit", str(runs[0]), "--clear-tags")
    assert cleared.returncode == 0 and "tags none" in cleared.stdout
    table = cli("ls", "--tag", tag)
    assert table.returncode == 0 and str(runs[1]) in table.stdout
    assert f" {runs[0]} " not in table.stdout

    refused = cli("ls", "--sort", "colour")
    assert refused.returncode == 1 and "cannot sort by 'colour'" in refused.stderr
    nothing = cli("edit", str(runs[0]))
    assert nothing.returncode == 1 and "nothing to change" in nothing.stderr


def test_ls_filter_takes_the_filter_language(cli: Cli) -> None:
    from app.runs.models import RunTag

    tag = f"lang-{secrets.token_hex(3)}"
    runs = []
    for lr, acc in [(0.001, 0.9), (0.1, 0.7), (0.05, 0.8)]:
        config = {"recipe": "tiny_mlp", "params": {"lr": lr}, "seed": 1}
        run_id = make_run(config=config, status="succeeded")
        with session_scope() as session:
            record_config(session, run_id=run_id, config=config)
            ingest_points(session, run_id=run_id, points=[("val/acc", 3, acc, 1.0)])
            session.add(RunTag(run_id=run_id, tag=tag))
        runs.append(run_id)
    listed = cli(
        "ls", "--json", "--sort", "id",
        "--filter", f"tags={tag} and (val/acc>0.85 or lr in (0.1, 0.2))",
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert [r["id"] for r in json.loads(listed.stdout)] == [runs[0], runs[1]]
    refused = cli("ls", "--filter", "val/acc>")
    assert refused.returncode == 1 and "position 8: expected a value after '>'" in refused.stderr


def test_resume_with_set_overrides_and_the_final_pt_rule(cli: Cli) -> None:
    from app.runs.models import Checkpoint
    from app.settings import get_settings

    config = {"recipe": "tiny_mlp", "params": {"epochs": 2, "lr": 0.05}, "seed": 1}
    run_id = make_run(config=config, status="succeeded")
    path = get_settings().run_dir(run_id) / "checkpoints" / "final.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not really torch")
    with session_scope() as session:
        session.add(
            Checkpoint(
                run_id=run_id, name="final.pt", epoch=2, step=10, size_bytes=16,
                path="checkpoints/final.pt",
            )
        )  # fmt: skip
    refused = cli("resume", str(run_id), "final.pt", "--set", "params.lr=0.01")
    assert refused.returncode == 1 and "raise params.epochs above 2" in refused.stderr
    done = cli(
        "resume", str(run_id), "final.pt", "-q",
        "--set", "params.epochs=4", "--set", "params.lr=0.01",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    new = int(done.stdout.strip())
    shown = cli("ls", "--json", "--filter", "params.params.lr=0.01")
    assert shown.returncode == 0, shown.stderr
    got = {r["id"]: r for r in json.loads(shown.stdout)}
    assert got[new]["params"]["params.epochs"] == 4


def test_logs_of_a_multi_node_run_by_node_and_rank(cli: Cli, tmp_path: Path) -> None:
    """`torchyard logs --node K --rank N`: each node's log as its worker shipped it; a rank
    alone reads its node's; a rank of another node is refused with the reason."""
    config = {"recipe": "tiny_mlp", "params": {}, "resources": {"nodes": 2, "nproc": 2, "gpus": 0}}
    run_id = make_run(config=config, status="succeeded")
    logs = {0: "[rank0]: zero\n[rank1]: one\n", 1: "[rank2]: two\n[rank3]: three\n"}
    for node, text in logs.items():
        path = tmp_path / f"node{node}.log"
        path.write_text(text)
        with session_scope() as session:
            assert log_store.ship(session, run_id=run_id, log_path=path, final=True, node=node)
    for args, out in [
        ((), logs[0]),
        (("--node", "1"), logs[1]),
        (("--node", "1", "--rank", "3"), "[rank3]: three\n"),
        (("--rank", "2"), "[rank2]: two\n"),
        (("--rank", "1", "--tail", "12"), "[rank1]: one\n"[-12:]),
    ]:
        done = cli("logs", str(run_id), *args)
        assert done.returncode == 0 and done.stdout == out, (args, done.stderr)
    refused = cli("logs", str(run_id), "--node", "0", "--rank", "3")
    assert refused.returncode != 0 and "rank 3 runs on node 1, not node 0" in refused.stderr


def test_ls_suffixes_a_queued_runs_status_with_its_estimate() -> None:
    """`torchyard ls`: a queued run's expected start (local time) or "(no estimate)"."""
    from datetime import UTC, datetime

    from torchyard.cli.runs import _estimate

    start = datetime(2026, 12, 7, 1, 2, 3, tzinfo=UTC)
    run = {"estimated_start": start.isoformat(), "estimate_basis": "its GPUs are free now"}
    assert _estimate(run) == f" ~{start.astimezone().strftime('%H:%M:%S')}"
    basis = "no estimate: run 4 has no known length"
    assert _estimate({"estimated_start": None, "estimate_basis": basis}) == " (no estimate)"
    assert _estimate({"estimated_start": None, "estimate_basis": None}) == ""
