"""metrics/get-history (app/mlflow/history.py: the database writes the body) through the real
``mlflow`` client and over plain HTTP: pages, every value read back as the double logged, keys
of any characters."""

from __future__ import annotations

import math
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from tests.mlflow_server import mlflow_member, serving


@pytest.fixture(scope="module")
def server(app: Any) -> Iterator[str]:
    with serving(app) as url:
        yield url


@pytest.fixture
def member(server: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    return mlflow_member(server, monkeypatch)


def test_a_history_read_in_pages_keeps_every_point(server: str, member: dict[str, str]) -> None:
    """metrics/get-history's pages (the database writes their JSON: app/mlflow/history.py):
    every point comes back as logged, page by page, NaN as NaN. Timestamps are the logged
    milliseconds (they were truncated: 1.001 s stored read back as 1000 ms)."""
    client = MlflowClient()
    run_id = client.create_run(client.create_experiment(f"h-{secrets.token_hex(4)}")).info.run_id
    values = [float("nan") if s == 7 else 0.5 + s for s in range(2500)]
    for start in range(0, 2500, 1000):
        client.log_batch(
            run_id,
            metrics=[
                Metric("loss", values[s], 1000 + s, s)
                for s in range(start, min(2500, start + 1000))
            ],
        )
    got, token = [], None
    while True:
        params = {"run_id": run_id, "metric_key": "loss", "max_results": 1000}
        r = httpx.get(
            f"{server}/api/2.0/mlflow/metrics/get-history",
            params=params | ({"page_token": token} if token else {}),
            headers=member,
        )
        r.raise_for_status()
        got += r.json()["metrics"]
        token = r.json().get("next_page_token")
        if not token:
            break
    assert [p["step"] for p in got] == list(range(2500))
    assert [p["timestamp"] for p in got] == [1000 + s for s in range(2500)]
    assert got[7]["value"] == "NaN"
    assert [p["value"] for p in got if p["step"] != 7] == [v for v in values if v == v]
    r = httpx.get(f"{server}/api/2.0/mlflow/runs/get", params={"run_id": run_id}, headers=member)
    assert r.json()["run"]["data"]["metrics"] == [
        {"key": "loss", "value": 2499.5, "timestamp": 3499, "step": 2499}
    ]
    assert len(client.get_metric_history(run_id, "loss")) == 2500


# What the database writes for each value must read back as the same double (app/mlflow/history.py):
# the edges of SQLite's printf path (1e-100 < |v| < 1e100), PostgreSQL's whole numbers (written
# without a fraction there), the shortest texts, the longest mantissas, the extremes.
EDGE_VALUES = [
    0.0,
    -0.0,
    3.0,
    -7.0,
    1e15,
    1e15 - 1,
    1e16,
    2.0**53,
    2.0**53 + 2,
    0.1,
    1 / 3,
    2 / 3,
    0.30000000000000004,
    1e-05,
    -2.5e-07,
    123456789.125,
    1.2345678901234568e17,
    1.0000000000000002,
    0.9999999999999999,
    1e-100,
    1.0000000000000001e-100,
    1e100,
    9.999999999999999e99,
    -1e300,
    1.7976931348623157e308,
    -1.7976931348623157e308,
    2.2250738585072014e-308,
    5e-324,
    -5e-324,
    *(1.0 / (1 + s) for s in range(1, 400)),
    *(math.pi * 10.0**e for e in range(-120, 121, 7)),
]


def test_a_history_s_values_read_back_as_the_same_doubles(
    server: str, member: dict[str, str]
) -> None:
    """Every finite value comes back as the double logged (a JSON float: ``3.0``, not ``3``);
    NaN as "NaN" (torchyard stores it as a gap), the infinities as "Infinity" and "-Infinity"
    (stored as they are); -0.0 keeps its sign on
    PostgreSQL (SQLite stores an integral REAL as an integer: 0.0 there, as before); big
    timestamps and steps as integers; the real client reads the same values."""
    from tests.conftest import DATABASE_URL

    client = MlflowClient()
    run_id = client.create_run(client.create_experiment(f"v-{secrets.token_hex(4)}")).info.run_id
    values = [math.nan, math.inf, -math.inf, *EDGE_VALUES]
    base = 1_764_200_000_123
    steps = [s * 1_000_003 for s in range(len(values))]
    client.log_batch(
        run_id, metrics=[Metric("v", v, base + s, steps[s]) for s, v in enumerate(values)]
    )
    r = httpx.get(
        f"{server}/api/2.0/mlflow/metrics/get-history",
        params={"run_id": run_id, "metric_key": "v"},
        headers=member,
    )
    r.raise_for_status()
    got = r.json()["metrics"]
    assert [p["step"] for p in got] == steps
    assert [p["timestamp"] for p in got] == [base + s for s in range(len(values))]
    assert [p["key"] for p in got] == ["v"] * len(values)
    assert [p["value"] for p in got[:3]] == ["NaN", "Infinity", "-Infinity"]
    finite = [p["value"] for p in got[3:]]
    assert all(type(v) is float for v in finite), [v for v in finite if type(v) is not float]
    assert finite == EDGE_VALUES
    negative_zero = math.copysign(1.0, finite[1])
    assert negative_zero == (-1.0 if DATABASE_URL.startswith("postgresql") else 1.0)
    read = client.get_metric_history(run_id, "v")
    assert math.isnan(read[0].value) and [m.value for m in read[1:3]] == [math.inf, -math.inf]
    assert [m.value for m in read[3:]] == EDGE_VALUES
    assert r.headers["content-type"] == "application/json"


def test_a_history_s_key_is_written_as_json_whatever_its_characters(
    server: str, member: dict[str, str]
) -> None:
    """The key is part of each point's text the database writes: quotes, backslashes, printf's
    % and non-ASCII come back as logged (a raw log-batch: the client allows fewer names)."""
    client = MlflowClient()
    run_id = client.create_run(client.create_experiment(f"k-{secrets.token_hex(4)}")).info.run_id
    key = 'loss %s %d %% "q" \\ ü\'s/å'
    body = {"run_id": run_id, "metrics": [{"key": key, "value": 0.5, "timestamp": 7, "step": 3}]}
    httpx.post(
        f"{server}/api/2.0/mlflow/runs/log-batch", json=body, headers=member
    ).raise_for_status()
    r = httpx.get(
        f"{server}/api/2.0/mlflow/metrics/get-history",
        params={"run_id": run_id, "metric_key": key},
        headers=member,
    )
    assert r.json() == {"metrics": [{"key": key, "value": 0.5, "timestamp": 7, "step": 3}]}


def test_a_long_history_is_streamed_in_chunks_and_keeps_every_point(
    app: Any, server: str, member: dict[str, str]
) -> None:
    """A page longer than one chunk (app.mlflow.history.CHUNK_POINTS) is sent as it is read
    (chunked; gzipped as it goes for a client across a network, app/compression.py): every
    point once and in order, the page's limit and its token exact at and across the chunks'
    edges, the same JSON gzipped or not; a series that ends exactly at a chunk's edge ends
    with no token."""
    from app.mlflow.history import CHUNK_POINTS

    total = 2 * CHUNK_POINTS
    client = MlflowClient()
    run_id = client.create_run(client.create_experiment(f"c-{secrets.token_hex(4)}")).info.run_id
    for start in range(0, total, 1000):
        client.log_batch(
            run_id, metrics=[Metric("loss", 1 / (1 + s), s, s) for s in range(start, start + 1000)]
        )

    def page(encoding: str, **params: Any) -> httpx.Response:
        r = httpx.get(
            f"{server}/api/2.0/mlflow/metrics/get-history",
            params={"run_id": run_id, "metric_key": "loss", **params},
            headers=member | {"Accept-Encoding": encoding},
            timeout=60,
        )
        r.raise_for_status()
        return r

    whole = page("gzip")
    assert whole.headers["transfer-encoding"] == "chunked"
    assert "content-encoding" not in whole.headers  # a client on this machine
    remote = TestClient(app, client=("203.0.113.7", 50000)).get(
        "/api/2.0/mlflow/metrics/get-history",
        params={"run_id": run_id, "metric_key": "loss"},
        headers=member | {"Accept-Encoding": "gzip"},
    )
    assert remote.headers["content-encoding"] == "gzip"
    assert remote.content == whole.content == page("identity").content
    body = whole.json()
    assert "next_page_token" not in body
    assert [p["step"] for p in body["metrics"]] == list(range(total))
    assert [p["value"] for p in body["metrics"]] == [1 / (1 + s) for s in range(total)]
    for limit in (CHUNK_POINTS - 1, CHUNK_POINTS, CHUNK_POINTS + 1, total - 1):
        first = page("gzip", max_results=limit).json()
        assert [p["step"] for p in first["metrics"]] == list(range(limit)), limit
        rest = page("identity", max_results=total, page_token=first["next_page_token"]).json()
        assert [p["step"] for p in rest["metrics"]] == list(range(limit, total)), limit
        assert "next_page_token" not in rest
    assert "next_page_token" not in page("gzip", max_results=total).json()
    small = page("identity", max_results=10)
    assert small.headers["content-length"] == str(len(small.content))
    assert len(client.get_metric_history(run_id, "loss")) == total
    with httpx.stream(
        "GET",
        f"{server}/api/2.0/mlflow/metrics/get-history",
        params={"run_id": run_id, "metric_key": "loss"},
        headers=member,
    ) as cut:
        next(cut.iter_raw())  # the first chunk, then the client goes away mid-page
    client.log_batch(run_id, metrics=[Metric("loss", 0.5, total, total)])  # no read left open
    assert [p["step"] for p in page("identity").json()["metrics"]] == list(range(total + 1))
