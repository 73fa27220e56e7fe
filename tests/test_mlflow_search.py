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


@pytest.mark.parametrize(
    ("text", "says"),
    [
        # MLflow's own parser reads an IN list as a tuple: values need commas between them
        ("params.opt IN ('adam' 'sgd')", "IN takes values separated by commas"),
        ("tags.t NOT IN ('a', 'b' 'c')", "IN takes values separated by commas"),
        ("params.opt IN ()", "IN takes one value or more"),
        ("params.opt IN (,)", "Invalid filter value ','"),
        ("params.opt = )", "Invalid filter value ')'"),
        ("params.opt IN ('adam',", "an IN list without its closing parenthesis"),
        ("params.opt IN ('adam'", "an IN list without its closing parenthesis"),
        ("tags.t NOT LIKE 'a%'", "Invalid comparator 'NOT LIKE'"),
        ("params.opt = adam", "Invalid filter value 'adam'"),
        ("params.opt", "expected <entity>.<key> <comparator> <value>"),
        ("params.opt = 'adam' AND", "expected <entity>.<key> <comparator> <value>"),
    ],
)
def test_mlflow_s_lists_and_comparators_are_read_as_mlflow_reads_them(text: str, says: str) -> None:
    with pytest.raises(MlflowError) as refused:
        parse_filter(text)
    assert refused.value.code == INVALID_PARAMETER_VALUE
    assert says in refused.value.message, refused.value.message


def test_an_in_list_with_commas_compiles_to_its_values() -> None:
    for text in ("params.opt IN ('adam', 'sgd')", "params.opt IN ('adam', 'sgd',)"):
        (clause,) = parse_filter(text)
        assert "'adam', 'sgd')" in str(clause.compile(compile_kwargs={"literal_binds": True}))
