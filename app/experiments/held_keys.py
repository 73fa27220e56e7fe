"""Which metric summaries the experiment page holds for its newest runs (issue 31).

The page held every listed key's summary of its 200 newest runs: 662 KB of its 722 KB at 20
keys, 170-370 ms of server CPU, and ~2.5x that at 50 keys, while the runs table shows two
summary columns and the parallel coordinates one metric. So the page holds the names of the
keys (for the charts, the column picker and the filter's suggestions) and the summaries of
the keys its scripts show first, chosen by the same rules as they are:

- the table's default columns (app/static/runs_columns.js `defaultSummaries`): the key naming
  a loss and the key naming an accuracy that most runs logged (issue 41: a mixed experiment's
  val/acc, not the train/acc only its job runs log), so every key naming one (at most
  MAX_CANDIDATES of each, the system series aside: the script counts the runs carrying each),
  else the first key;
- the parallel coordinates' default metric (app/static/experiment_parcoords.js
  `defaultMetric`): the first validation key.

"First" is in the pages' key order (app/static/lib/format.js `compareKeys`), copied here by
`key_order`. A column or metric chosen later (a reader's pick, a saved view, this browser's
remembered columns) is asked of GET /api/runs with `summary_keys=`: the page lists the held
keys so the table knows which it can show without asking.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_LOSS = re.compile("loss", re.IGNORECASE)
_ACC = re.compile("acc", re.IGNORECASE)
_VAL = re.compile(r"(^|/)val(id(ation)?)?(/|$)", re.IGNORECASE)
MAX_CANDIDATES = 6  # keys naming a loss (an accuracy) held for the table's default columns


def key_group(key: str) -> str:
    """What comes before the key's first "/" ("" without one): lib/format.js keyGroup."""
    cut = key.find("/")
    return key[:cut] if cut > 0 else ""


def key_order(key: str) -> tuple[int, str, str, str]:
    """The sort key of lib/format.js compareKeys: named groups by name (case-insensitive, then
    exact), then the ungrouped keys, then the system series (sys/); in a group, by name."""
    group = key_group(key)
    rank = 2 if group == "sys" else 1 if group == "" else 0
    return (rank, group.lower(), group, key)


def held_keys(keys: Iterable[str]) -> list[str]:
    """The keys of ``keys`` whose summaries the page holds (the rules above), in key order."""
    ordered = sorted(set(keys), key=key_order)
    logged = [k for k in ordered if key_group(k) != "sys"]
    table = [k for p in (_LOSS, _ACC) for k in [k for k in logged if p.search(k)][:MAX_CANDIDATES]]
    if not table and ordered:
        table.append(ordered[0])
    chosen = set(table)
    val = _first(ordered, _VAL)
    if val is not None:
        chosen.add(val)
    return sorted(chosen, key=key_order)


def _first(ordered: list[str], pattern: re.Pattern[str]) -> str | None:
    return next((k for k in ordered if pattern.search(k)), None)
