"""MLflow's run search (``filter_string``, ``order_by``) as SQL over torchyard's tables.

The filter is MLflow's: clauses joined by AND, each ``<entity>.<key> <op> <value>``:
- ``metrics.<key>`` compares the last value (metric_keys.last_value): = != < <= > >=;
- ``params.<key>``, ``tags.<key>`` compare the logged string: = != LIKE ILIKE IN NOT IN (and
  < <= > >= when the value is a number: torchyard keeps the number a param spells);
- ``attributes.`` (or no prefix): status, run_name, run_id, start_time, end_time.
A key with other characters is quoted with backticks or double quotes (``metrics.`val/acc```).
``order_by``: ``<entity>.<key> [ASC|DESC]``, runs without the key last; ties by start time
(newest first) then id, MLflow's default order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import ColumnElement, Select, and_, func, not_, select
from sqlalchemy.orm import aliased

from app.filter_tokens import Lexicon, Token, TokenError, tokens
from app.metrics.models import MetricKey
from app.mlflow.errors import invalid
from app.mlflow.reads import PARAM_PREFIX, RUN_NAME_TAG, TAG_PREFIX
from app.mlflow.schemas import FROM_MLFLOW, from_millis
from app.runs.models import Run, RunParam

_WORD = re.compile(r"[A-Za-z0-9_./:\-]")
# MLflow's tokens (app/filter_tokens.py, shared with the runs filter): 'strings' only (a
# double quote, like a backtick, wraps part of a key: metrics.`val/acc`, params."my key").
LEXICON = Lexicon(
    operators=("!=", "<=", ">=", "=", "<", ">"),
    string_quotes="'",
    word_char=lambda char: _WORD.fullmatch(char) is not None,
    word_quotes='`"',
)
_NUMBER = re.compile(r"^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_ENTITIES = {
    "metric": "metrics",
    "metrics": "metrics",
    "param": "params",
    "params": "params",
    "parameter": "params",
    "parameters": "params",
    "tag": "tags",
    "tags": "tags",
    "attribute": "attributes",
    "attributes": "attributes",
    "attr": "attributes",
    "run": "attributes",
}
_COMPARE = {
    "=": lambda c, v: c == v,
    "!=": lambda c, v: c != v,
    "<": lambda c, v: c < v,
    "<=": lambda c, v: c <= v,
    ">": lambda c, v: c > v,
    ">=": lambda c, v: c >= v,
}


@dataclass(frozen=True)
class Name:
    entity: str  # metrics | params | tags | attributes
    key: str


def parse_name(text: str) -> Name:
    entity, dot, rest = text.partition(".")
    if dot and entity.lower() in _ENTITIES and rest:
        kind, key = _ENTITIES[entity.lower()], rest
    else:
        kind, key = "attributes", text
    if len(key) >= 2 and key[0] == key[-1] and key[0] in '`"':
        key = key[1:-1]
    return Name(kind, key)


def _tokens(text: str) -> list[Token]:
    """The filter's tokens, without the end token; MLflow's error where it cannot be read."""
    text = text.strip()
    try:
        return tokens(text, LEXICON)[:-1]
    except TokenError as exc:
        raise invalid(
            f"Invalid filter string at position {exc.pos}: {text[exc.pos : exc.pos + 20]!r}"
        ) from None


def _literal(token: Token) -> str | float:
    if token.kind == "string":
        return token.text
    if token.kind == "word" and _NUMBER.match(token.text):
        return float(token.text)
    raise invalid(f"Invalid filter value {token.text!r}: a number or a 'quoted string'")


def _param_clause(key: str, op: str, value: Any) -> ColumnElement[bool]:
    """``runs.id IN (the runs whose param matches)``: the match is read through the param's
    (key, value) index, not probed once per run of the experiment (2.2x faster over 10,000
    runs on SQLite than the correlated EXISTS it replaced)."""
    p = aliased(RunParam)
    where = [p.key == key]
    if op in ("LIKE", "ILIKE"):
        column = p.value_text if op == "LIKE" else func.lower(p.value_text)
        pattern = str(value) if op == "LIKE" else str(value).lower()
        where.append(column.like(pattern))
    elif op in ("IN", "NOT IN"):
        where.append(p.value_text.in_([str(v) for v in value]))
        matched = Run.id.in_(select(p.run_id).where(*where))
        return not_(matched) if op == "NOT IN" else matched
    elif isinstance(value, float):
        where.append(_COMPARE[op](p.value_num, value))
    elif op in ("=", "!="):
        where.append(_COMPARE[op](p.value_text, value))
    else:
        raise invalid(f"Invalid comparator {op!r} for a string value")
    return Run.id.in_(select(p.run_id).where(*where))


def _attribute_clause(key: str, op: str, value: Any) -> ColumnElement[bool]:
    if key == "status":
        listed = value if op.endswith("IN") else [value]
        wanted = [FROM_MLFLOW.get(str(v).upper()) for v in listed]
        if None in wanted:
            raise invalid(f"Invalid status in filter: {value!r}")
        cond = Run.status.in_(wanted)
        return not_(cond) if op in ("!=", "NOT IN") else cond
    if key in ("run_name", "name"):
        return _text_compare(Run.name, op, value)
    if key in ("run_id", "run_uuid", "id"):
        ids = [int(v) for v in (value if op.endswith("IN") else [value]) if str(v).isdigit()]
        cond = Run.id.in_(ids)
        return not_(cond) if op in ("!=", "NOT IN") else cond
    if key in ("start_time", "end_time", "created"):
        column = Run.started_at if key == "start_time" else Run.finished_at
        if not isinstance(value, float) or op not in _COMPARE:
            raise invalid(f"Invalid filter on {key}: compare it with a number (milliseconds)")
        return cast(ColumnElement[bool], _COMPARE[op](column, from_millis(int(value))))
    raise invalid(f"Invalid attribute key {key!r}")


def _text_compare(column: Any, op: str, value: Any) -> ColumnElement[bool]:
    if op == "LIKE":
        return cast(ColumnElement[bool], column.like(str(value)))
    if op == "ILIKE":
        return func.lower(column).like(str(value).lower())
    if op in ("IN", "NOT IN"):
        cond = cast(ColumnElement[bool], column.in_([str(v) for v in value]))
        return not_(cond) if op == "NOT IN" else cond
    if op in ("=", "!="):
        return cast(ColumnElement[bool], _COMPARE[op](column, str(value)))
    raise invalid(f"Invalid comparator {op!r} for a string value")


def _clause(name: Name, op: str, value: Any) -> ColumnElement[bool]:
    if name.entity == "metrics":
        if not isinstance(value, float) or op not in _COMPARE:
            raise invalid(f"Invalid filter on metric {name.key!r}: compare it with a number")
        k = aliased(MetricKey)
        return Run.id.in_(
            select(k.run_id).where(k.key == name.key, _COMPARE[op](k.last_value, value))
        )
    if name.entity == "params":
        return _param_clause(PARAM_PREFIX + name.key, op, value)
    if name.entity == "tags":
        if name.key == RUN_NAME_TAG:
            return _text_compare(Run.name, op, value)
        return _param_clause(TAG_PREFIX + name.key, op, value)
    return _attribute_clause(name.key, op, value)


def parse_filter(text: str | None) -> list[ColumnElement[bool]]:
    if not text or not text.strip():
        return []
    tokens = _tokens(text)
    clauses: list[ColumnElement[bool]] = []
    i = 0
    while i < len(tokens):
        if clauses:
            if tokens[i].text.upper() != "AND":
                raise invalid(f"Invalid filter: expected AND, got {tokens[i].text!r}")
            i += 1
        if i + 2 > len(tokens) or tokens[i].kind != "word":
            raise invalid("Invalid filter: expected <entity>.<key> <comparator> <value>")
        name = parse_name(tokens[i].text)
        op, i = tokens[i + 1].text.upper(), i + 2
        if op in ("NOT", "IS") and i < len(tokens):
            op, i = f"{op} {tokens[i].text.upper()}", i + 1
        if op in ("IN", "NOT IN"):
            values, i = _in_list(tokens, i)
            clauses.append(_clause(name, op, values))
            continue
        if op not in _COMPARE and op not in ("LIKE", "ILIKE"):
            raise invalid(f"Invalid comparator {op!r}")
        if i >= len(tokens):
            raise invalid("Invalid filter: a comparison without a value")
        clauses.append(_clause(name, op, _literal(tokens[i])))
        i += 1
    return clauses


def _in_list(tokens: list[Token], i: int) -> tuple[list[Any], int]:
    if i >= len(tokens) or tokens[i].kind != "(":
        raise invalid("Invalid filter: IN takes a list: ('a', 'b')")
    values: list[Any] = []
    i += 1
    while i < len(tokens) and tokens[i].kind != ")":
        if tokens[i].kind != ",":
            values.append(_literal(tokens[i]))
        i += 1
    if i >= len(tokens):
        raise invalid("Invalid filter: an IN list without its closing parenthesis")
    return values, i + 1


def apply_order(stmt: Select[Any], order_by: list[str]) -> Select[Any]:
    for item in order_by:
        parts = item.strip().rsplit(None, 1)
        descending = len(parts) == 2 and parts[1].upper() == "DESC"
        text = parts[0] if len(parts) == 2 and parts[1].upper() in ("ASC", "DESC") else item
        name = parse_name(text.strip())
        column: Any
        # A sort key is one LEFT JOIN (a run has at most one row per key), not a correlated
        # subquery evaluated twice per run (for IS NULL and for the value).
        if name.entity == "metrics":
            k = aliased(MetricKey)
            stmt = stmt.outerjoin(k, and_(k.run_id == Run.id, k.key == name.key))
            column = k.last_value
        elif name.entity in ("params", "tags"):
            prefix = PARAM_PREFIX if name.entity == "params" else TAG_PREFIX
            p = aliased(RunParam)
            stmt = stmt.outerjoin(p, and_(p.run_id == Run.id, p.key == prefix + name.key))
            column = p.value_text
        elif name.key in ("start_time", "created"):
            column = Run.started_at
        elif name.key == "end_time":
            column = Run.finished_at
        elif name.key in ("run_name", "name"):
            column = Run.name
        elif name.key == "status":
            column = Run.status
        elif name.key in ("run_id", "id"):
            column = Run.id
        else:
            raise invalid(f"Invalid order_by clause {item!r}")
        stmt = stmt.order_by(column.is_(None), column.desc() if descending else column.asc())
    return stmt.order_by(Run.started_at.desc(), Run.id.desc())


# What a search reads of each run: the columns runs_json shows, not the whole ORM row (its
# JSON columns, config, environment, notices, cost a json.loads each per run).
RUN_COLUMNS = (
    Run.id,
    Run.experiment_id,
    Run.owner_id,
    Run.status,
    Run.name,
    Run.notes,
    Run.created_at,
    Run.started_at,
    Run.finished_at,
)


def search_statement(
    experiment_ids: list[int], filter_text: str | None, order_by: list[str]
) -> Select[Any]:
    """The matching runs' RUN_COLUMNS in MLflow's order (rows, not ORM objects)."""
    stmt = select(*RUN_COLUMNS).where(
        Run.experiment_id.in_(experiment_ids), *parse_filter(filter_text)
    )
    return apply_order(cast(Select[Any], stmt), order_by)
