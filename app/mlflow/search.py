"""MLflow's run search (``filter_string``, ``order_by``) as SQL over torchyard's tables.

The filter is MLflow's: clauses joined by AND, each ``<entity>.<key> <op> <value>``:
- ``metrics.<key>`` compares the last value (metric_keys.last_value): = != < <= > >=;
- ``params.<key>``, ``tags.<key>`` compare the logged string: = != LIKE ILIKE IN NOT IN (and
  < <= > >= when the value is a number: torchyard keeps the number a param spells);
- ``attributes.`` (or no prefix): status, run_name, run_id, start_time, end_time.
A key with other characters is quoted with backticks or double quotes (``metrics.`val/acc```).
An IN list is MLflow's: one value or more, separated by commas (``IN ('a', 'b')``).
The parser is app/filter_grammar.py's (shared with the runs filter) under ``GRAMMAR``; this
module words its errors as MLflow does and compiles the conditions.
``order_by``: ``<entity>.<key> [ASC|DESC]``, runs without the key last; ties by start time
(newest first, unless sorted by it) then id (ascending), MLflow's default order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import ColumnElement, Select, and_, func, not_, select
from sqlalchemy.orm import aliased

from app import filter_grammar
from app.filter_grammar import Condition, Grammar, GrammarError, Value
from app.filter_tokens import Lexicon
from app.metrics.models import MetricKey
from app.mlflow.errors import MlflowError, invalid
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
GRAMMAR = Grammar(
    lexicon=LEXICON,
    junctions=("and",),
    word_ops=(("like", "LIKE"), ("ilike", "ILIKE"), ("in", "IN"), ("not in", "NOT IN")),
    list_ops=frozenset({"IN", "NOT IN"}),
    trailing_comma=True,  # MLflow reads the list as a Python tuple: ('a',) is one
)
_LIST = "('a', 'b')"
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


def parse_conditions(text: str) -> list[Condition]:
    """The conditions of a filter (AND is MLflow's only junction), read from the text without
    its surrounding spaces; GrammarError where it cannot be read (``refusal`` words it)."""
    return filter_grammar.conditions(filter_grammar.parse(text.strip(), GRAMMAR))


def refusal(exc: GrammarError, text: str) -> MlflowError:
    """A grammar error in MLflow's words (INVALID_PARAMETER_VALUE)."""
    found = exc.found
    after = exc.after.kind if exc.after else ""
    if exc.reason in filter_grammar.TOKEN_REASONS:
        text = text.strip()
        return invalid(
            f"Invalid filter string at position {exc.pos}: {text[exc.pos : exc.pos + 20]!r}"
        )
    if exc.reason == "rest":
        return invalid(f"Invalid filter: expected AND, got {found.text!r}")
    if exc.reason == "key" or (exc.reason == "comparator" and found.kind == "end"):
        return invalid("Invalid filter: expected <entity>.<key> <comparator> <value>")
    if exc.reason == "comparator":
        return invalid(f"Invalid comparator {found.text.upper()!r}")
    if exc.reason == "list_open":
        return invalid(f"Invalid filter: IN takes a list: {_LIST}")
    if found.kind == "end" and (exc.reason == "list_sep" or after in ("(", ",")):
        return invalid("Invalid filter: an IN list without its closing parenthesis")
    if exc.reason == "list_sep":
        return invalid(f"Invalid filter: IN takes values separated by commas: {_LIST}")
    if exc.reason == "value" and found.kind == "end":
        return invalid("Invalid filter: a comparison without a value")
    if exc.reason == "value" and found.kind == ")" and after == "(":
        return invalid(f"Invalid filter: IN takes one value or more: {_LIST}")
    if exc.reason == "value":
        return _bad_value(found.text)
    return invalid(f"Invalid filter: {exc}")


def _bad_value(text: str) -> MlflowError:
    return invalid(f"Invalid filter value {text!r}: a number or a 'quoted string'")


def _literal(value: Value) -> str | float:
    if value.quoted:
        return value.text
    if _NUMBER.match(value.text):
        return float(value.text)
    raise _bad_value(value.text)


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
        return text_compare(Run.name, op, value)
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


def text_compare(column: Any, op: str, value: Any) -> ColumnElement[bool]:
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
            return text_compare(Run.name, op, value)
        return _param_clause(TAG_PREFIX + name.key, op, value)
    return _attribute_clause(name.key, op, value)


def parse_filter(text: str | None) -> list[ColumnElement[bool]]:
    """The filter's conditions as SQL; MLflow's error where it cannot be read or compiled."""
    if not text or not text.strip():
        return []
    try:
        found = parse_conditions(text)
    except GrammarError as exc:
        raise refusal(exc, text) from None
    clauses: list[ColumnElement[bool]] = []
    for condition in found:
        name = parse_name(condition.key)
        literals = [_literal(value) for value in condition.values]
        listed = condition.op in GRAMMAR.list_ops
        clauses.append(_clause(name, condition.op, literals if listed else literals[0]))
    return clauses


def apply_order(stmt: Select[Any], order_by: list[str]) -> Select[Any]:
    """MLflow's order: the clauses given, runs without the key last; then the start time,
    newest first, unless a clause sorted by it; then the run id, ascending (MLflow's
    SqlAlchemyStore: ``start_time DESC`` then ``run_uuid``)."""
    by_start = False
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
            column, by_start = Run.started_at, True
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
    if not by_start:
        stmt = stmt.order_by(Run.started_at.desc())
    return stmt.order_by(Run.id.asc())


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
