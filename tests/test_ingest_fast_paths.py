"""The shortcuts MLflow's log-batch path takes (issue 29) give what the plain ways give:
app.strict_json's checks from the body's bytes against a walk of the parsed value, the
log-batch metrics checked in one pass against MetricIn, and an overview extended by a batch
against the overview rebuilt from the merged points. Pure functions, no database."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from app.metrics.overview.points import Points, extend, fit, merge
from app.mlflow.errors import MlflowError
from app.mlflow.schemas import MetricIn, metric_points
from app.strict_json import MAX_DEPTH, UnfitJSON, check_value, parse


def _walked(body: bytes) -> str | None:
    """The plain check: the stdlib's parse, then a walk of every value."""
    try:
        check_value(json.loads(body))
    except UnfitJSON as exc:
        return str(exc)
    return None


def _parsed(body: bytes) -> str | None:
    try:
        parse(body)
    except UnfitJSON as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1])
def test_depth_from_the_bytes_counts_every_level_whatever_the_brackets(depth: int) -> None:
    """Alternating objects and arrays (one pass of the byte check used to be able to peel two
    levels), brackets and escaped quotes inside strings, siblings at every level."""
    value: object = 1
    for level in range(depth - 1):
        value = [value, "]}[{", 'q\\"]'] if level % 2 else {'k"[': value, "]": []}
    body = json.dumps([value]).encode()
    assert _parsed(body) == _walked(body)
    assert (_parsed(body) is None) == (depth < MAX_DEPTH)  # the innermost "]": [] is one more


def test_nul_in_random_bodies_is_refused_as_the_walk_refuses_it() -> None:
    rnd = random.Random(29)

    def value(depth: int) -> object:
        if depth > 40 or rnd.random() < 0.4:
            return rnd.choice([1, 1.5, "[{x", 'q"\\', "\x00", "\\u0000", None, "é", "😀"])
        if rnd.random() < 0.5:
            return [value(depth + 1) for _ in range(rnd.randint(1, 2))]
        return {rnd.choice(["k", "[", '"', "\x00"]) + str(i): value(depth + 1) for i in range(1)}

    outcomes = set()
    for _ in range(500):
        body = json.dumps(value(0), ensure_ascii=rnd.random() < 0.5).encode()
        outcomes.add(_walked(body))
        assert _parsed(body) == _walked(body), body[:200]
    assert None in outcomes and len(outcomes) >= 2  # accepted, and NUL (in a key, a value)


ODD_METRICS = [
    {"key": "a", "value": "NaN", "step": "3", "timestamp": "5"},
    {"key": "a", "value": True, "step": 2.0},
    {"key": "a", "value": " 1e3 ", "extra": 1},
    {"key": "a", "value": -0.0, "step": -(2**63), "timestamp": 2**63 - 1},
]


def test_log_batch_metrics_are_what_metric_in_makes_of_them() -> None:
    plain = [
        {"key": f"m{i % 3}", "value": i / 7, "step": i, "timestamp": 1000 + i} for i in range(9)
    ]
    items = plain + [{"key": "i", "value": 3}] + ODD_METRICS
    got = metric_points(items)
    assert got[:10] == [MetricIn.model_validate(m).point() for m in items[:10]]
    for point, item in zip(got[10:], ODD_METRICS, strict=True):
        expected = MetricIn.model_validate(item).point()
        assert point[:2] == expected[:2] and point[3] == expected[3]
        assert point[2] == expected[2] or (point[2] != point[2] and expected[2] != expected[2])


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ({"key": "a"}, "Missing value for required parameter 'metrics[1].value'"),
        ({"key": 5, "value": 1}, "Invalid value 5 for parameter 'metrics[1].key' supplied"),
        ({"key": "a", "value": 1, "step": 1.5}, "parameter 'metrics[1].step' supplied"),
        (["a", 1], "Invalid value [\"a\",1] for parameter 'metrics[1]' supplied"),
        # past int64 (the database's columns): was stored as is, and failed there (a 500)
        ({"key": "a", "value": 1, "step": 2**63}, "64-bit"),
        ({"key": "a", "value": 1, "timestamp": "-9223372036854775809"}, "64-bit"),
    ],
)
def test_a_bad_metric_is_refused_in_mlflow_s_shape_naming_it(item: object, says: str) -> None:
    with pytest.raises(MlflowError) as refused:
        metric_points([{"key": "ok", "value": 1.0}, item])
    assert refused.value.code == "INVALID_PARAMETER_VALUE"
    assert says in refused.value.message


def test_an_overview_extended_by_batches_is_the_one_rebuilt_from_all_its_points() -> None:
    rng = np.random.default_rng(29)
    checked = 0
    for _ in range(20):
        n = int(rng.integers(2, 4000))
        steps = np.cumsum(rng.integers(1, int(rng.choice([2, 5, 50])), n)).astype(np.int64)
        values = rng.choice([0.0, 1.0, np.nan], n) if rng.random() < 0.3 else rng.normal(size=n)
        times = rng.random(n)
        width, overview = fit(Points(steps[:1], values[:1], times[:1]), 1)
        start = 1
        while start < n:
            end = start + int(rng.integers(1, 400))
            batch = Points(steps[start:end], values[start:end], times[start:end])
            want_width, want = fit(merge(overview, batch), width)
            width, overview = extend(width, overview, batch)
            assert width == want_width
            assert np.array_equal(overview.steps, want.steps)
            assert np.array_equal(overview.values, want.values, equal_nan=True)
            assert np.array_equal(overview.times, want.times)
            start, checked = end, checked + 1
    assert checked > 100
