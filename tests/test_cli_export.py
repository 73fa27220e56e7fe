"""`torchyard export` as a subprocess against the live stack: the runs table (one row per run:
params, last metrics) as CSV to a file and to standard output, the full series with --series,
Parquet, and the experiment named by id or name; pandas reads each."""

from __future__ import annotations

import io
import secrets
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from app.db import session_scope
from app.metrics.ingest import ingest_points
from app.runs.query.params import record_config
from tests.factories import make_run
from tests.stack import LiveStack
from tests.test_cli import Cli, logged_in_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cli(live_stack: LiveStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    yield logged_in_cli(live_stack, tmp_path_factory.mktemp("cli-export") / "cli.json")


@pytest.fixture(scope="module")
def experiment(live_stack: LiveStack) -> tuple[int, str, list[int]]:
    name = f"export-{secrets.token_hex(3)}"
    config = {"recipe": "tiny_mlp", "params": {"lr": 0.1}, "seed": 1}
    with live_stack.admin_client() as api:
        exp = api.post("/api/experiments", json={"name": name, "config": config}).json()
    runs = []
    for lr, accs in [(0.001, [0.5, 0.9]), (0.1, [0.6, 0.7]), (0.05, [0.2, 0.8])]:
        run_config = {"recipe": "tiny_mlp", "params": {"lr": lr}, "seed": 1}
        run_id = make_run(config=run_config, status="succeeded", experiment_id=exp["id"])
        points = [("val/acc", step, acc, 1.0) for step, acc in enumerate(accs, start=1)]
        points += [("train/loss", step, 1.0 / step, 1.0) for step in range(1, 101)]
        with session_scope() as session:
            record_config(session, run_id=run_id, config=run_config)
            ingest_points(session, run_id=run_id, points=points)
        runs.append(run_id)
    return exp["id"], name, runs


def test_export_writes_one_row_per_run_with_params_and_last_metrics(
    cli: Cli, experiment: tuple[int, str, list[int]], tmp_path: Path
) -> None:
    exp_id, _, runs = experiment
    target = tmp_path / "runs.csv"
    done = cli("export", str(exp_id), "-o", str(target))
    assert done.returncode == 0, done.stderr
    assert f"wrote {target} (3 runs" in done.stderr
    table = pd.read_csv(target).set_index("id")
    assert sorted(table.index) == sorted(runs)
    assert table.loc[runs[0], "params.lr"] == 0.001
    assert table.loc[runs[0], "metrics.val/acc"] == 0.9
    assert table.loc[runs[2], "metrics.train/loss"] == pytest.approx(0.01)
    assert set(table["status"]) == {"succeeded"}


def test_export_by_name_to_standard_output(
    cli: Cli, experiment: tuple[int, str, list[int]]
) -> None:
    _, name, runs = experiment
    done = cli("export", name)
    assert done.returncode == 0, done.stderr
    assert len(pd.read_csv(io.StringIO(done.stdout))) == len(runs)
    kept = cli("export", name, "--filter", "val/acc>=0.8 and lr<0.01")  # the filter language
    assert kept.returncode == 0, kept.stderr
    assert list(pd.read_csv(io.StringIO(kept.stdout))["id"]) == [runs[0]]
    unknown = cli("export", "no-such-experiment-" + secrets.token_hex(3))
    assert unknown.returncode == 1 and "no experiment named" in unknown.stderr


def test_export_series_as_parquet_has_every_point(
    cli: Cli, experiment: tuple[int, str, list[int]], tmp_path: Path
) -> None:
    exp_id, _, runs = experiment
    target = tmp_path / "series.parquet"
    done = cli("export", str(exp_id), "--series", "train/loss", "--series", "val/acc",
               "--format", "parquet", "-o", str(target))  # fmt: skip
    assert done.returncode == 0, done.stderr
    frame = pd.read_parquet(target)
    assert len(frame) == 3 * (100 + 2)
    one = frame[(frame.run_id == runs[1]) & (frame.key == "train/loss")]
    assert list(one.step) == list(range(1, 101))
    binary = cli("export", str(exp_id), "--format", "parquet")
    assert binary.returncode == 2 and "give a file with -o" in binary.stderr
