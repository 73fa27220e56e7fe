"""app/filter_tokens.py: the one tokenizer of the runs filter and MLflow's search grammar,
under each language's lexicon (app.runs.query.filter_lang.LEXICON, app.mlflow.search.LEXICON)."""

from __future__ import annotations

import pytest

from app.filter_tokens import Token, TokenError, tokens
from app.mlflow.search import LEXICON as MLFLOW
from app.runs.query.filter_lang import LEXICON as RUNS


def _shape(found: list[Token]) -> list[tuple[str, str, int]]:
    return [(t.kind, t.text, t.pos) for t in found]


def test_runs_words_strings_operators_and_brackets() -> None:
    assert _shape(tokens('val/acc.max>=0.9 and opt in (\'a b\', "c\\"d")', RUNS)) == [
        ("word", "val/acc.max", 0),
        ("op", ">=", 11),
        ("word", "0.9", 13),
        ("word", "and", 17),
        ("word", "opt", 21),
        ("word", "in", 25),
        ("(", "(", 28),
        ("string", "a b", 29),
        (",", ",", 34),
        ("string", 'c"d', 36),
        (")", ")", 42),
        ("end", "", 43),
    ]
    assert [t.text for t in tokens("name~resnet-50 x==1", RUNS)] == [
        "name",
        "~",
        "resnet-50",
        "x",
        "==",
        "1",
        "",
    ]


def test_mlflow_keys_quote_part_of_a_word_and_strings_take_single_quotes() -> None:
    found = tokens("metrics.`val acc` >= -1e-3 AND params.\"my key\" LIKE 'a\\'b%'", MLFLOW)
    assert _shape(found) == [
        ("word", "metrics.`val acc`", 0),
        ("op", ">=", 18),
        ("word", "-1e-3", 21),
        ("word", "AND", 27),
        ("word", 'params."my key"', 31),
        ("word", "LIKE", 47),
        ("string", "a'b%", 52),
        ("end", "", 59),
    ]


@pytest.mark.parametrize(
    ("lexicon", "text", "pos", "reason"),
    [
        (RUNS, "lr!3", 2, "operator"),
        (RUNS, "name='abc", 5, "unclosed"),
        (MLFLOW, "params.opt ~ 'adam'", 11, "char"),  # ~ is the runs filter's, not MLflow's
        (MLFLOW, 'tags.t = "x', 9, "unclosed"),  # a double quote wraps a key's name
        (MLFLOW, "metrics.`loss < 1", 8, "unclosed"),
        (MLFLOW, "run_name = 'x", 11, "unclosed"),
    ],
)
def test_text_it_cannot_read_names_the_position_and_reason(
    lexicon: object, text: str, pos: int, reason: str
) -> None:
    with pytest.raises(TokenError) as refused:
        tokens(text, lexicon)  # type: ignore[arg-type]
    assert (refused.value.pos, refused.value.reason) == (pos, reason)
