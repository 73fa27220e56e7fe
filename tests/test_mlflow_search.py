"""MLflow's filter and order_by grammar (app/mlflow/search.py): what is taken, and a refusal
in MLflow's words for what is not (the client shows it as INVALID_PARAMETER_VALUE)."""

from __future__ import annotations

import pytest

from app.mlflow.errors import INVALID_PARAMETER_VALUE, MlflowError
from app.mlflow.search import Name, parse_filter, parse_name, search_statement


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("metrics.loss", Name("metrics", "loss")),
        ("metric.`val/acc`", Name("metrics", "val/acc")),
        ('params."batch size"', Name("params", "batch size")),
        ("tags.mlflow.runName", Name("tags", "mlflow.runName")),
        ("attributes.status", Name("attributes", "status")),
        ("status", Name("attributes", "status")),
    ],
)
def test_names_take_mlflow_s_entities_and_quotes(text: str, name: Name) -> None:
    assert parse_name(text) == name


@pytest.mark.parametrize(
    "text",
    [
        "",
        "metrics.loss < 0.5",
        "metrics.`val/acc` >= 0.9 and params.opt = 'adam'",
        "params.lr <= 0.01 AND tags.team LIKE 'vis%'",
        "params.opt IN ('adam', 'sgd') and attributes.status != 'FAILED'",
        "tags.x NOT IN ('a') and run_name ILIKE '%base%'",
        "attributes.start_time > 1700000000000",
        "tags.t = 'a\\'b'",
    ],
)
def test_filters_mlflow_writes_compile(text: str) -> None:
    search_statement([1], text, ["metrics.loss DESC", "params.lr", "attributes.start_time"])


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("metrics.loss < 'high'", "compare it with a number"),
        ("params.opt ~ 'adam'", "Invalid filter string at position"),
        ("params.opt = 'adam' or params.lr = '1'", "expected AND"),
        ("params.opt IN 'adam'", "IN takes a list"),
        ("attributes.colour = 'red'", "Invalid attribute key"),
        ("status = 'DONE'", "Invalid status"),
        ("params.opt =", "without a value"),
    ],
)
def test_a_filter_it_cannot_read_is_refused_with_the_reason(text: str, says: str) -> None:
    with pytest.raises(MlflowError) as refused:
        parse_filter(text)
    assert refused.value.code == INVALID_PARAMETER_VALUE
    assert says in refused.value.message


def test_an_order_by_it_cannot_read_is_refused() -> None:
    with pytest.raises(MlflowError, match="Invalid order_by"):
        search_statement([1], None, ["attributes.colour"])
