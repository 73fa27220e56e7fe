"""One type per column of an export, whatever the mix of origins (docs/export.md).

A job's params are JSON values (``0.01``, ``64``, ``true``); an MLflow client's are the strings
it sent (``"0.01"``, ``"64"``); one experiment holds both. A column takes one type from all its
values (a missing value is null in any type):

- ``bool`` when every value is a bool or spells one (``true``/``false``, any case);
- ``int64`` when every value is a whole number or a string that spells one (``64``, ``"-3"``);
- ``float64`` when every value is a number or a string that spells one (``0.01``, ``"1e-3"``);
- otherwise ``string``: numbers and bools as their text (``0.01`` -> ``"0.01"``, ``True`` ->
  ``"True"``, as MLflow writes them), lists and mappings as JSON.

The fixed columns have fixed types: ``id`` and ``owner_id`` (and a series' ``run_id`` and
``step``) int64, the rest of them string; a metric (``metrics.<key>``, a series' ``value``)
is float64 always.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


class Kind(enum.StrEnum):
    BOOL = "bool"
    INT = "int64"
    FLOAT = "float64"
    TEXT = "string"


INT_TEXT = re.compile(r"[+-]?\d+")
FLOAT_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
BOOL_TEXT = {"true": True, "false": False}
FIXED = {
    "id": Kind.INT,
    "owner_id": Kind.INT,
    "run_id": Kind.INT,
    "step": Kind.INT,
    "value": Kind.FLOAT,
    "name": Kind.TEXT,
    "run_name": Kind.TEXT,
    "key": Kind.TEXT,
    "status": Kind.TEXT,
    "created_at": Kind.TEXT,
    "started_at": Kind.TEXT,
    "finished_at": Kind.TEXT,
    "tags": Kind.TEXT,
}
METRIC_PREFIX = "metrics."


def _missing(value: Any) -> bool:
    return value is None or value == "" or (isinstance(value, float) and math.isnan(value))


def _fits(value: Any, kind: Kind) -> bool:
    if kind is Kind.BOOL:
        return isinstance(value, bool) or (
            isinstance(value, str) and value.strip().lower() in BOOL_TEXT
        )
    if isinstance(value, bool):
        return False
    if kind is Kind.INT:
        return isinstance(value, int) or (
            isinstance(value, str) and INT_TEXT.fullmatch(value.strip()) is not None
        )
    if kind is Kind.FLOAT:
        if isinstance(value, int | float):
            return math.isfinite(value)
        return isinstance(value, str) and FLOAT_TEXT.fullmatch(value.strip()) is not None
    return True


def infer(column: str, values: Iterable[Any]) -> Kind:
    """The one type of a column, by the rules above."""
    if column in FIXED:
        return FIXED[column]
    if column.startswith(METRIC_PREFIX):
        return Kind.FLOAT
    present = [v for v in values if not _missing(v)]
    if not present:
        return Kind.TEXT
    for kind in (Kind.BOOL, Kind.INT, Kind.FLOAT):
        if all(_fits(v, kind) for v in present):
            return kind
    return Kind.TEXT


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list | dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def convert(value: Any, kind: Kind) -> Any:
    """A value as its column's type (None when missing)."""
    if _missing(value):
        return None
    if kind is Kind.BOOL:
        return value if isinstance(value, bool) else BOOL_TEXT[value.strip().lower()]
    if kind is Kind.INT:
        return int(value.strip()) if isinstance(value, str) else int(value)
    if kind is Kind.FLOAT:
        try:
            number = float(value.strip()) if isinstance(value, str) else float(value)
        except (TypeError, ValueError):
            return None  # a metric's value that is not a number (never from the API)
        return number if math.isfinite(number) else None
    return _text(value)


def typed(
    columns: Sequence[str], rows: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, Kind], list[dict[str, Any]]]:
    """Each column's type and the rows with every value converted to it."""
    kinds = {c: infer(c, (row.get(c) for row in rows)) for c in columns}
    out = [{c: convert(row.get(c), kinds[c]) for c in columns} for row in rows]
    return kinds, out
