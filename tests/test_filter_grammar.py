"""app/filter_grammar.py: the one parser of the runs filter and MLflow's search grammar, under
each language's Grammar (app.runs.query.filter_lang.GRAMMAR, app.mlflow.search.GRAMMAR): the tree it
builds, the reason and position of what it refuses, its limits; and the experiments' name
filter (app.mlflow.service), which reads MLflow's grammar and allows one condition of it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy.dialects import sqlite

from app.filter_grammar import (
    Condition,
    Grammar,
    GrammarError,
    Junction,
    Value,
    conditions,
    parse,
)
from app.filter_tokens import Token
from app.mlflow.errors import INVALID_PARAMETER_VALUE, MlflowError
from app.mlflow.search import GRAMMAR as MLFLOW
from app.mlflow.service import experiment_name_filter
from app.runs.query.filter_lang import GRAMMAR as RUNS


def _refused(text: str, grammar: Grammar) -> GrammarError:
    with pytest.raises(GrammarError) as refused:
        parse(text, grammar)
    return refused.value


def test_both_languages_build_the_same_tree() -> None:
    runs = parse("lr >= 0.1 and opt in (adam, 'sgd')", RUNS)
    mlflow = parse("params.lr >= 0.1 AND params.opt IN ('adam', 'sgd')", MLFLOW)
    assert runs == Junction(
        "and",
        (
            Condition("lr", ">=", (Value("0.1"),), 0),
            Condition("opt", "in", (Value("adam"), Value("sgd", quoted=True)), 14),
        ),
    )
    assert mlflow == Junction(
        "and",
        (
            Condition("params.lr", ">=", (Value("0.1"),), 0),
            Condition("params.opt", "IN", (Value("adam", True), Value("sgd", True)), 21),
        ),
    )
    assert parse("", MLFLOW) is None and parse("  ", RUNS) is None


def test_word_operators_are_read_in_any_case_longest_first() -> None:
    found = parse("tags.t not In ('a') and run_name ilike '%b%' And x Like 'c'", MLFLOW)
    assert [(c.key, c.op) for c in conditions(found)] == [
        ("tags.t", "NOT IN"),
        ("run_name", "ILIKE"),
        ("x", "LIKE"),
    ]
    assert parse("opt IN (a)", RUNS) == Condition("opt", "in", (Value("a"),), 0)


def test_only_the_runs_filter_has_or_parentheses_and_quoted_keys() -> None:
    assert isinstance(parse("(a=1 or b=2) and 'my key'=3", RUNS), Junction)
    assert _refused("a = 1 or b = 2", MLFLOW).reason == "rest"
    assert _refused("(a = 1)", MLFLOW).reason == "key"
    assert _refused("'my key' = 1", MLFLOW).reason == "key"


def test_reserved_words_are_no_key_or_bare_value_where_the_grammar_says_so() -> None:
    assert _refused("and = 1", RUNS).reason == "key"
    assert _refused("a = or", RUNS).reason == "value"
    assert parse("a = 'or'", RUNS) == Condition("a", "=", (Value("or", True),), 0)
    # MLflow's grammar reserves nothing: its compiler says what a key or a value means
    assert parse("and = in", MLFLOW) == Condition("and", "=", (Value("in"),), 0)


@pytest.mark.parametrize(
    ("grammar", "text", "reason", "pos", "found", "after"),
    [
        (RUNS, "name='abc", "unclosed", 5, "'", None),
        (RUNS, "lr!3", "operator", 2, "!", None),
        (MLFLOW, "params.opt ~ 'a'", "char", 11, "~", None),
        (RUNS, ">3", "key", 0, ">", None),
        (RUNS, "lr 0.1", "comparator", 3, "0.1", "lr"),
        (MLFLOW, "params.a", "comparator", 8, "", "params.a"),
        (MLFLOW, "tags.t NOT LIKE 'a'", "comparator", 7, "NOT LIKE", "tags.t"),
        (RUNS, "val/acc.max>", "value", 12, "", ">"),
        (MLFLOW, "tags.t IN ()", "value", 11, ")", "("),
        (RUNS, "opt in adam", "list_open", 7, "adam", "in"),
        (MLFLOW, "tags.t NOT IN 'a'", "list_open", 14, "a", "NOT IN"),
        (RUNS, "opt in (a b)", "list_sep", 10, "b", "("),
        (RUNS, "(lr>1", "close", 5, "", "("),
        (RUNS, "lr>1 lr<2", "rest", 5, "lr", None),
        (MLFLOW, "a = 1 b = 2", "rest", 6, "b", None),
    ],
)
def test_refusals_carry_a_reason_the_position_and_the_tokens_around(
    grammar: Grammar, text: str, reason: str, pos: int, found: str, after: str | None
) -> None:
    refused = _refused(text, grammar)
    assert (refused.reason, refused.pos, refused.found.text) == (reason, pos, found)
    assert (refused.after.text if refused.after else None) == after


def test_an_in_list_takes_commas_as_mlflow_s_own_parser_does() -> None:
    """MLflow reads an IN list as a tuple of strings (search_utils._parse_list_from_sql_token);
    values side by side without a comma are not a list there, and not here."""
    refused = _refused("params.opt IN ('adam' 'sgd')", MLFLOW)
    assert (refused.reason, refused.pos, refused.found.text) == ("list_sep", 22, "sgd")
    assert parse("params.opt IN ('adam','sgd')", MLFLOW) == Condition(
        "params.opt", "IN", (Value("adam", True), Value("sgd", True)), 0
    )
    # and, as a Python tuple, it may end with a comma; the runs filter's may not
    assert parse("params.opt IN ('adam',)", MLFLOW) == Condition(
        "params.opt", "IN", (Value("adam", True),), 0
    )
    refused = _refused("opt in (adam,)", RUNS)
    assert (refused.reason, refused.pos, refused.after) == ("value", 13, Token(",", ",", 12))
    assert _refused("params.opt IN (,)", MLFLOW).reason == "value"


def test_length_depth_and_terms_are_bounded_where_the_grammar_says() -> None:
    tight = replace(RUNS, max_length=10, max_depth=2, max_terms=2)
    assert parse("a=1 or b=2", tight) is not None
    refused = _refused("a=1 or b=22", tight)
    assert (refused.reason, refused.pos) == ("length", 10)
    assert parse("((a=1))", tight) is not None
    refused = _refused("(((a=1)))", tight)
    assert (refused.reason, refused.pos) == ("depth", 2)
    refused = _refused("a=1 or b=2 or c=3", replace(tight, max_length=None))
    assert (refused.reason, refused.pos) == ("terms", 14)
    # a grammar without groups nests nothing, whatever the depth: "(" is no key there
    assert _refused("(a=1)", replace(RUNS, groups=False)).reason == "key"


def test_conditions_flattens_an_and_only_tree() -> None:
    assert conditions(None) == []
    assert len(conditions(parse("a = 1 and b = 2 AND c = 3", MLFLOW))) == 3
    with pytest.raises(ValueError, match="not a conjunction"):
        conditions(parse("a=1 or b=2", RUNS))


def _sql(text: str) -> str:
    clause = experiment_name_filter(text)
    return str(clause.compile(dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True}))


def test_the_experiment_name_filter_takes_one_name_condition() -> None:
    assert _sql("name = 'vision'") == "experiments.name = 'vision'"
    assert _sql("  attributes.name != 'x' ") == "experiments.name != 'x'"
    assert _sql("name LIKE 'vis%'") == "experiments.name LIKE 'vis%'"
    assert _sql("name ilike 'VIS%'") == "lower(experiments.name) LIKE 'vis%'"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("name = 'a' AND name = 'b'", "Unsupported experiment filter"),
        ("name IN ('a', 'b')", "Unsupported experiment filter"),
        ("name = vision", "Unsupported experiment filter"),
        ("creation_time > 0", "Unsupported experiment filter"),
        ("name =", "Unsupported experiment filter"),
        ("name NOT LIKE 'a'", "Unsupported experiment filter"),
        ("name = 'a' OR name = 'b'", "Unsupported experiment filter"),
        ("name = 'vision", 'Invalid filter string at position 7: "\'vision"'),
        ("name < 'b'", "Invalid comparator '<' for a string value"),
    ],
)
def test_the_experiment_name_filter_refuses_the_rest_in_mlflow_s_words(
    text: str, says: str
) -> None:
    with pytest.raises(MlflowError) as refused:
        experiment_name_filter(text)
    assert refused.value.code == INVALID_PARAMETER_VALUE
    assert says in refused.value.message
