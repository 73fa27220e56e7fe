"""+inf and -inf logged are stored and read back exactly (app/metrics/ingest.py keeps them,
app/metrics/finite.py says how JSON carries them), on SQLite and PostgreSQL: MLflow reads
"Infinity" back, torchyard's summaries, series, sorting and filters show a divergence as the
largest value (never a gap), and NaN stays NaN (MLflow) / null (torchyard)."""

from __future__ import annotations

import math
import secrets
import time
from typing import Any

import httpx
import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from app.metrics.finite import BIGGEST, json_value, json_values
from tests.mlflow_server import mlflow_member

INF = math.inf


def test_json_carries_infinity_as_the_largest_double() -> None:
    assert json_value(INF) == BIGGEST == 1.7976931348623157e308
    assert json_value(-INF) == -BIGGEST
    assert json_value(1.5) == 1.5 and json_value(None) is None and json_value(math.nan) is None
    plain = [1.0, None, 2.0]
    assert json_values(plain) is plain  # nothing infinite: the same list, no copy
    assert json_values([1.0, INF, None, -INF]) == [1.0, BIGGEST, None, -BIGGEST]


def test_infinities_round_trip_through_mlflow_and_show_in_torchyard(
    mlflow_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    headers = mlflow_member(mlflow_server, monkeypatch)
    client = MlflowClient()
    experiment_id = client.create_experiment(f"inf-{secrets.token_hex(4)}")
    diverged = client.create_run(experiment_id, run_name="diverged").info.run_id
    steady = client.create_run(experiment_id, run_name="steady").info.run_id
    now = int(time.time() * 1000)
    losses = [1.0, 0.5, 2.0, 1e30, INF]
    client.log_batch(diverged, metrics=[Metric("loss", v, now, s) for s, v in enumerate(losses)])
    client.log_metric(diverged, "inf_metric", INF)
    client.log_metric(diverged, "-inf_metric", -INF)
    client.log_metric(diverged, "nan_metric", math.nan)
    client.log_batch(steady, metrics=[Metric("loss", 1.0 / (1 + s), now, s) for s in range(5)])

    read = client.get_run(diverged).data.metrics
    assert read["loss"] == INF and read["inf_metric"] == INF and read["-inf_metric"] == -INF
    assert math.isnan(read["nan_metric"])
    history = client.get_metric_history(diverged, "loss")
    assert [m.value for m in history] == losses
    assert [m.value for m in client.get_metric_history(diverged, "-inf_metric")] == [-INF]
    found = client.search_runs([experiment_id], filter_string="metrics.loss > 1e300")
    assert [r.info.run_id for r in found] == [diverged]
    ordered = client.search_runs([experiment_id], order_by=["metrics.loss DESC"])
    assert [r.info.run_id for r in ordered] == [diverged, steady]

    with httpx.Client(base_url=mlflow_server, headers=headers, timeout=30) as api:
        run = api.get(f"/api/runs/{diverged}").json()
        assert run["summary"]["loss"] == {"last": BIGGEST, "min": 0.5, "max": BIGGEST, "step": 4}
        assert run["summary"]["-inf_metric"]["last"] == -BIGGEST
        for max_points in (None, 4):  # every point, and the chart's downsampled view
            params: dict[str, Any] = {"keys": "loss"}
            if max_points:
                params["max_points"] = max_points
            series = api.get(f"/api/runs/{diverged}/metrics", params=params).json()["series"]
            assert series["loss"]["value"][-1] == BIGGEST, series  # a spike, not a gap
        listed = api.get(
            "/api/runs",
            params={"experiment_id": experiment_id, "filter": "summary.loss.max>1e300"},
        ).json()["runs"]
        assert [r["id"] for r in listed] == [int(diverged)]
        ranked = api.get(
            "/api/runs", params={"experiment_id": experiment_id, "sort": "-summary.loss.last"}
        ).json()["runs"]
        assert [r["id"] for r in ranked] == [int(diverged), int(steady)]
