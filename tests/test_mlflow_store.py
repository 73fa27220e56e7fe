"""MLflow's own client inside a job (torchyard.mlflow_store): what it logs becomes lines of the
run's spool, which the worker's forwarder stores as the run's points and reported params, and
every run it creates is the job's run. Real MLflow client, real forwarder, real database."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from sqlalchemy.orm import Session, sessionmaker

from app.metrics.service import read_series
from app.runs.query.params import params_by_run
from tests.factories import admin_run
from torchyard.contract import METRICS_FILE, RUN_DIR_VAR, RUN_ID_VAR
from torchyard.mlflow_store import TRACKING_URI
from worker import spool_lines
from worker.forwarder import forward
from worker.launcher import MLFLOW_TRACKING_URI
from worker.spool_lines import BadLine, check_line


def test_the_launchers_uri_is_the_stores() -> None:
    assert MLFLOW_TRACKING_URI == TRACKING_URI


def test_outside_a_job_the_scheme_says_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RUN_DIR_VAR, raising=False)
    monkeypatch.delenv(RUN_ID_VAR, raising=False)
    with pytest.raises(MlflowException, match="only inside a torchyard job"):
        MlflowClient(tracking_uri=TRACKING_URI).create_run("0")


def test_a_params_line_must_be_names_to_scalars() -> None:
    good = {"type": "params", "values": {"lr": "0.01", "n": 3, "on": True}}
    assert check_line(json.dumps(good).encode()) == good
    for values in ([1], {"lr": [1]}, {"lr": {"a": 1}}, {"": "x"}, {"lr": None}):
        with pytest.raises(BadLine, match="params line"):
            check_line(json.dumps({"type": "params", "values": values}).encode())


def test_what_the_mlflow_client_logs_in_a_job_is_the_jobs_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db_sessions: sessionmaker[Session]
) -> None:
    with db_sessions.begin() as session:
        run_id = admin_run(session)
    monkeypatch.setenv(RUN_DIR_VAR, str(tmp_path))
    monkeypatch.setenv(RUN_ID_VAR, str(run_id))
    client = MlflowClient(tracking_uri=TRACKING_URI)
    # A logger makes its own experiment and run: both are the job's.
    assert client.get_experiment_by_name("lightning_logs") is not None
    first = client.create_run("0", tags={"team": "vision", "mlflow.user": "x"})
    second = client.create_run(client.create_experiment("another"))
    assert first.info.run_id == second.info.run_id == str(run_id)
    client.log_param(first.info.run_id, "lr", 0.01)
    for step in range(1, 4):
        client.log_metric(first.info.run_id, "loss", 1.0 / step, step=step)
    client.log_metric(first.info.run_id, "bad", float("inf"), step=3)
    client.log_metric(first.info.run_id, "low", -float("inf"), step=3)
    client.log_metric(first.info.run_id, "nan", float("nan"), step=3)
    client.set_terminated(first.info.run_id)  # the job's exit decides, not the script

    spool = tmp_path / METRICS_FILE
    parsed = spool_lines.parse_spool(spool.read_bytes())
    assert not parsed.skipped and parsed.non_finite
    for raw in spool.read_text().splitlines():
        json.loads(raw, parse_constant=pytest.fail)  # strict JSON: +/-inf as their tokens
    with db_sessions.begin() as session:
        while forward(session, run_id=run_id, metrics_path=spool):
            pass
    with db_sessions() as session:
        series = read_series(session, run_id=run_id)
        params = params_by_run(session, [run_id])[run_id]
    assert series["loss"]["step"] == [1, 2, 3]
    assert series["loss"]["value"] == pytest.approx([1.0, 0.5, 1 / 3])
    # +/-inf stored as logged (issue 41), read as JSON carries them (app/metrics/finite.py)
    assert series["bad"]["value"] == [sys.float_info.max]
    assert series["low"]["value"] == [-sys.float_info.max]
    assert series["nan"]["value"] == [None]
    assert params["hparams.lr"] == "0.01"
    assert params["hparams.tags.team"] == "vision"
    assert "hparams.tags.mlflow.user" not in params
