"""`torchyard export` as a subprocess against the live stack: the runs table (one row per run:
params, last metrics) as CSV to a file and to standard output, the full series with --series,
Parquet, and the experiment named by id or name; pandas reads each."""

from __future__ import annotations

import io
import secrets
from collections.abc import Iterator
from pathlib import Path

import mlflow
import pandas as pd
import pytest

from app.db import session_scope
from app.metrics.ingest import ingest_points
from app.runs.query.params import record_config
from tests.factories import make_run
from tests.mlflow_server import mlflow_member
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


def kind(column: pd.Series) -> str:
    """ "text" for strings (pandas 3's str dtype, or object of strings), else the dtype."""
    return "text" if pd.api.types.is_string_dtype(column) else str(column.dtype)


def test_a_mixed_experiments_parquet_has_one_type_per_column(
    cli: Cli, live_stack: LiveStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An MLflow-logged run (params as the strings the real client sends) beside a job's run
    (params as numbers): each column one type (docs/export.md), as pandas reads it back."""
    name = f"mixed-{secrets.token_hex(3)}"
    mlflow_member(live_stack.base_url, monkeypatch)
    mlflow.set_experiment(name)
    with mlflow.start_run(run_name="from-mlflow"):
        mlflow.log_params({"lr": 0.01, "batch_size": 64, "optimizer": "adam", "note": "three"})
        mlflow.log_param("only_mlflow", "1e-3")
        mlflow.log_metric("val/acc", 0.5, step=1)
    with live_stack.admin_client() as api:
        exp_id = next(e["id"] for e in api.get("/api/experiments").json() if e["name"] == name)
    config = {"recipe": "tiny_mlp", "params": {"lr": 0.1, "batch_size": 32, "optimizer": "sgd",
              "note": 3, "amp": True}, "seed": 1}  # fmt: skip
    job_run = make_run(config=config, status="succeeded", experiment_id=exp_id)
    with session_scope() as session:
        record_config(session, run_id=job_run, config=config)
        ingest_points(session, run_id=job_run, points=[("val/acc", 1, 0.75, 1.0)])
    target = tmp_path / "mixed.parquet"
    done = cli("export", str(exp_id), "--format", "parquet", "-o", str(target))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    frame = pd.read_parquet(target).set_index("id")
    types = {c: kind(frame[c]) for c in frame.columns if c.startswith("params.")}
    assert types == {
        "params.lr": "float64",
        "params.batch_size": "int64",
        "params.optimizer": "text",
        "params.note": "text",  # 3 and "three"
        "params.only_mlflow": "float64",  # "1e-3", missing in the job's run (NaN)
        "params.amp": "object",  # a bool missing in one run: pandas' object of True/None
    }
    assert sorted(frame["params.batch_size"]) == [32, 64]
    assert sorted(frame["params.note"]) == ["3", "three"]
    assert frame.loc[job_run, "params.lr"] == 0.1
    assert str(frame["metrics.val/acc"].dtype) == "float64"
    assert str(frame["owner_id"].dtype) == "int64"
    # The same columns in CSV read back to the same numbers.
    csv_target = tmp_path / "mixed.csv"
    assert cli("export", str(exp_id), "-o", str(csv_target)).returncode == 0
    table = pd.read_csv(csv_target).set_index("id")
    assert str(table["params.batch_size"].dtype) == "int64"
    assert sorted(table["params.note"]) == ["3", "three"]


def test_parquet_without_pyarrow_says_so_before_fetching_anything(
    cli: Cli, live_stack: LiveStack, tmp_path: Path
) -> None:
    """An install without pyarrow (a module of that name that fails to import, first on the
    path): the error names pyarrow, before any request (the stack's log has none)."""
    shadow = tmp_path / "shadow" / "pyarrow"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no pyarrow here')\n")
    cli.env["PYTHONPATH"] = str(shadow.parent)
    try:
        done = cli("export", "999999", "--format", "parquet", "-o", str(tmp_path / "x.parquet"))
    finally:
        del cli.env["PYTHONPATH"]
    assert done.returncode == 1, done.stderr
    assert "--format parquet needs pyarrow" in done.stderr
    assert "no experiment" not in done.stderr and "Traceback" not in done.stderr
