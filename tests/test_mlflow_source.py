"""`torchyard import mlflow` from a real `mlflow server` (SQLite store, served artifacts) and from
an `mlruns` folder, both written by the real MLflow client in the test, into torchyard on a
real uvicorn server: every param, tag and point (step, value, wall time), status, times and
artifacts equal to the source's, read back through MLflow's own client; a second import adds
nothing; a broken run folder, a broken metric file and a store that is not one are named, and
the rest is imported."""

from __future__ import annotations

import secrets
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from app.db import session_scope
from app.runs.models import Run
from tests.mlflow_server import (  # noqa: F401 (fixtures)
    imported_runs,
    importer_token,
    real_mlflow_server,
    torchyard_server,
)
from torchyard.cli import main
from torchyard.cli.importers.sink import COMPLETE_TAG, KIND_TAG, RUN_ID_TAG, SOURCE_TAG

pytestmark = pytest.mark.slow
POINTS = 1500  # more than one log-batch request (1,000 metrics) per key
STATUSES = ("FINISHED", "FAILED", "KILLED")
NOT_COPIED = {"mlflow.user", "mlflow.runName"}  # the owner is the importer; the name is the run's


def log_source(client: MlflowClient, tmp_path: Path, experiment: str) -> list[str]:
    """Three runs as a training script logs them: params, tags, two keys of POINTS points with
    their own wall times, an artifact in a folder, each run ending its own way."""
    experiment_id = client.create_experiment(experiment)
    report = tmp_path / "notes.txt"
    report.write_text("what the run learned\n")
    ids = []
    start = int(time.time() * 1000) - 10_000_000
    for i, status in enumerate(STATUSES):
        run = client.create_run(experiment_id, run_name=f"run-{i}", start_time=start + i)
        run_id = run.info.run_id
        params = [Param("lr", str(0.1 / (i + 1))), Param("optimizer", "adam")]
        tags = [RunTag("team", "vision"), RunTag("note", "a sentence, not a tag")]
        client.log_batch(run_id, params=params, tags=tags)
        for first in range(0, POINTS, 500):
            metrics = [
                Metric(key, value, start + 1000 * step + i, step)
                for step in range(first, first + 500)
                for key, value in (("train/loss", 1.0 / (step + 1 + i)), ("val/acc", step * 1e-4))
            ]
            client.log_batch(run_id, metrics=metrics)
        client.log_artifact(run_id, str(report), artifact_path="reports")
        client.set_terminated(run_id, status=status, end_time=start + 5_000_000 + i)
        ids.append(run_id)
    return ids


def run_import(*args: str, server: str, token: str) -> int:
    return main(["import", "mlflow", *args, "--server", server, "--token", token])


def imported(server: str, experiment: str) -> dict[str, Any]:
    return imported_runs(server, experiment, RUN_ID_TAG)


def assert_equal_runs(source: MlflowClient, server: str, run_ids: list[str], copy: Any) -> None:
    target = MlflowClient(tracking_uri=server)
    for run_id in run_ids:
        want = source.get_run(run_id)
        assert copy[run_id].data.tags[SOURCE_TAG] and copy[run_id].data.tags[KIND_TAG] == "mlflow"
        got = target.get_run(copy[run_id].info.run_id)
        assert got.info.run_name == want.info.run_name
        assert got.info.status == want.info.status
        assert got.info.start_time == want.info.start_time
        assert got.info.end_time == want.info.end_time
        assert got.data.params == want.data.params
        wanted_tags = {k: v for k, v in want.data.tags.items() if k not in NOT_COPIED}
        assert {k: v for k, v in got.data.tags.items() if k in wanted_tags} == wanted_tags
        assert got.data.tags["imported"] == "mlflow" and got.data.tags[COMPLETE_TAG] == "true"
        for key in want.data.metrics:
            expected = sorted(
                (m.step, m.value, m.timestamp) for m in source.get_metric_history(run_id, key)
            )
            actual = sorted(
                (m.step, m.value, m.timestamp)
                for m in target.get_metric_history(got.info.run_id, key)
            )
            assert len(expected) == POINTS and actual == expected
        files = [f.path for f in target.list_artifacts(got.info.run_id, "reports")]
        assert files == ["reports/notes.txt"]


def test_import_from_an_mlflow_server_is_exact_and_idempotent(
    server: str, token: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with real_mlflow_server(tmp_path) as source_url:
        source = MlflowClient(tracking_uri=source_url)
        run_ids = log_source(source, tmp_path, f"team-{secrets.token_hex(3)}")
        into = f"imported-{secrets.token_hex(3)}"
        assert run_import(source_url, "--experiment", into, server=server, token=token) == 0
        said = capsys.readouterr().err
        assert f"imported 3 runs ({3 * 2 * POINTS:,} points, 6 params" in said
        assert "3 files" in said and repr(into) in said
        copy = imported(server, into)
        assert sorted(copy) == sorted(run_ids)
        assert_equal_runs(source, server, run_ids, copy)
        with session_scope() as session:
            run = session.get(Run, int(copy[run_ids[0]].info.run_id))
            assert run is not None and run.origin == "mlflow"

        assert run_import(source_url, "--experiment", into, server=server, token=token) == 0
        again = capsys.readouterr().err
        assert "imported 0 runs (0 points" in again and "3 runs were imported before" in again
        assert len(imported(server, into)) == 3


def test_import_from_an_mlruns_folder_names_what_it_cannot_read(
    server: str, token: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "mlruns"
    source = MlflowClient(tracking_uri=folder.as_uri())
    experiment = f"folder-{secrets.token_hex(3)}"
    run_ids = log_source(source, tmp_path, experiment)
    experiment_id = source.get_experiment_by_name(experiment).experiment_id  # type: ignore[union-attr]
    # run 1: its meta.yaml gone (MLflow itself passes over it with a log line); run 2: one
    # metric file with a broken line (MLflow's search fails on the whole experiment for it)
    (folder / experiment_id / run_ids[1] / "meta.yaml").unlink()
    broken = folder / experiment_id / run_ids[2] / "metrics" / "val" / "acc"
    broken.write_text(broken.read_text() + "not a metric line at all\n")

    assert run_import(str(folder), server=server, token=token) == 1
    said = capsys.readouterr().err
    assert "imported 1 runs" in said
    assert f"skipped: {folder / experiment_id / run_ids[1] / 'meta.yaml'}: run {run_ids[1]}" in said
    assert f"skipped: {broken}: run {run_ids[2]}: Metric 'val/acc' is malformed" in said
    copy = imported(server, experiment)  # into the source experiment's own name
    assert sorted(copy) == [run_ids[0]]
    assert_equal_runs(source, server, run_ids[:1], copy)

    assert run_import(str(folder), server=server, token=token) == 1  # still says what it skips
    assert "1 runs were imported before" in capsys.readouterr().err
    assert len(imported(server, experiment)) == 1


def test_a_store_that_is_not_one_is_named_before_anything_is_written(
    server: str, token: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "mlflow.db"
    store.write_bytes(b"this is not a database" * 100)
    assert run_import(str(store), server=server, token=token) == 1
    said = capsys.readouterr().err
    assert f"error: {store}: cannot read it as an MLflow store" in said
    assert run_import(str(tmp_path / "missing"), server=server, token=token) == 1
    assert "no such folder or file" in capsys.readouterr().err
    with sqlite3.connect(store) as db:  # untouched
        with pytest.raises(sqlite3.DatabaseError):
            db.execute("select 1 from sqlite_master").fetchall()
