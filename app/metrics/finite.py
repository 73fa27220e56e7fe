"""Stored metric values as JSON carries them. A point's value is stored as logged, +inf and -inf
included (a diverging loss stays one); NaN is stored NULL (SQLite has no NaN) and reads as
null. JSON has no infinity, so what app/metrics hands to torchyard's JSON API (series, live
points, overlays, summaries) carries +inf as the largest double, 1.7976931348623157e308, and
-inf as its negative: a divergence is drawn at the top (or bottom) of a chart and sorts and
filters as the largest value, never a gap. MLflow's API writes the stored value itself
(``"Infinity"``, app/mlflow)."""

from __future__ import annotations

import math
import sys

BIGGEST = sys.float_info.max
_INF = math.inf


def json_value(value: float | None) -> float | None:
    if value is None or -BIGGEST <= value <= BIGGEST:
        return value
    if value != value:  # NaN: never stored, but a reader may meet one (numpy's view of NULL)
        return None
    return BIGGEST if value > 0 else -BIGGEST


def json_values(values: list[float | None]) -> list[float | None]:
    """The values as JSON carries them; the same list when none is infinite (the usual case:
    one scan in C, no copy)."""
    if _INF in values or -_INF in values:
        return [json_value(v) for v in values]
    return values
