"""The filter language's parser (app/runs/query/filter_lang.py): the tree it reads, and where and
why it refuses text (the position is what the runs table shows)."""

from __future__ import annotations

import pytest

from app.runs.query.filter_lang import (
    MAX_DEPTH,
    Condition,
    FilterError,
    Junction,
    Value,
    parse,
)


def _cond(key: str, op: str, *values: str, pos: int = 0) -> Condition:
    return Condition(key, op, tuple(Value(v) for v in values), pos)


def test_bare_keys_operators_and_values_read_as_written() -> None:
    assert parse("val/acc>0.9") == _cond("val/acc", ">", "0.9")
    assert parse("  lr <= 1e-3 ") == _cond("lr", "<=", "1e-3", pos=2)
    assert parse("val/acc.max>=0.9") == _cond("val/acc.max", ">=", "0.9")
    assert parse("name~resnet-50") == _cond("name", "~", "resnet-50")
    assert parse("params.params.lr==0.1") == _cond("params.params.lr", "==", "0.1")
    assert parse("opt != 'a b'") == Condition("opt", "!=", (Value("a b", quoted=True),), 0)
    assert parse('"my key"="it\\"s"') == Condition("my key", "=", (Value('it"s', True),), 0)
    assert parse("") is None and parse("   ") is None


def test_a_lone_word_searches_names() -> None:
    assert parse("ext-1") == _cond("name", "~", "ext-1")
    assert parse("'a b'") == Condition("name", "~", (Value("a b", quoted=True),), 0)
    assert parse("ext-1 and lr>0.1") == Junction(
        "and", (_cond("name", "~", "ext-1"), _cond("lr", ">", "0.1", pos=10))
    )
    assert parse("(a) or b") == Junction(
        "or", (_cond("name", "~", "a", pos=1), _cond("name", "~", "b", pos=7))
    )


def test_and_binds_tighter_than_or_and_parentheses_group() -> None:
    a, b, c = _cond("a", "=", "1"), _cond("b", "=", "2", pos=7), _cond("c", "=", "3", pos=15)
    assert parse("a=1 or b=2 and c=3") == Junction("or", (a, Junction("and", (b, c))))
    grouped = parse("(a=1 OR b=2) and c=3")
    assert grouped == Junction(
        "and",
        (
            Junction("or", (_cond("a", "=", "1", pos=1), _cond("b", "=", "2", pos=8))),
            _cond("c", "=", "3", pos=17),
        ),
    )


def test_in_takes_a_list() -> None:
    assert parse("opt in (adam, 'sgd', 3)") == Condition(
        "opt", "in", (Value("adam"), Value("sgd", quoted=True), Value("3")), 0
    )


@pytest.mark.parametrize(
    ("text", "pos", "says"),
    [
        ("val/acc.max>", 12, "expected a value after '>'"),
        ("lr<=", 4, "expected a value after '<='"),
        ("lr 0.1", 3, "expected an operator"),
        ("lr (", 3, "expected an operator"),
        ("(lr>1", 5, "expected ')' to close the '(' at position 0"),
        ("lr>1 and", 8, "expected a key"),
        ("lr>1 lr<2", 5, "expected 'and', 'or' or the end"),
        (">3", 0, "expected a key"),
        ("lr!3", 2, "'!' is not an operator"),
        ("opt in adam", 7, "expected '(' after 'in'"),
        ("opt in (adam sgd)", 13, "expected ',' or ')'"),
        ("name='abc", 5, "never closed"),
        ("lr>1)", 4, "expected 'and', 'or' or the end, found ')'"),
    ],
)
def test_refused_text_names_the_position_and_what_was_expected(
    text: str, pos: int, says: str
) -> None:
    with pytest.raises(FilterError) as refused:
        parse(text)
    assert refused.value.pos == pos and says in str(refused.value)
    assert str(refused.value).startswith(f"position {pos}: ")


def test_nesting_and_length_are_bounded() -> None:
    deep = "(" * (MAX_DEPTH + 1) + "a=1" + ")" * (MAX_DEPTH + 1)
    with pytest.raises(FilterError, match="parentheses inside each other"):
        parse(deep)
    with pytest.raises(FilterError, match="at most 50 conditions"):
        parse(" or ".join(["a=1"] * 51))
