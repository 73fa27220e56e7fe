"""A run's params: what it was launched with and what its job says it used, one row per key.

Two sources, one flat namespace (the ``params`` of the runs API, design.md "Runs at scale"):
- "config": the launch config flattened to dotted keys (``params.lr``, ``seed``,
  ``resources.nproc``), written when the run is queued (app.runs.state.lifecycle.queue);
- "reported": hyperparameters the job logged as TensorBoard hparams (``add_hparams``,
  Lightning's ``log_hyperparams``), as ``hparams.<name>``, written by the worker as it reads
  the event files (worker.tensorboard_events). A later report of a name replaces its value.

- "script": the job's own ``torchyard.init(config=...)``, flattened as the launch config is and
  under ``params.`` (``params.lr``, ``params.model.depth``), written by the worker as it reads
  the spool (worker.spool_lines); a key the launch config gave keeps the launch's value (the
  run's ``run.config`` is the launch's too), and a different script value is returned to be
  said on the run (app.runs.state.notices).
- "mlflow": what a client logged through the MLflow API (app/mlflow): its params as
  ``params.<name>`` (so the filter's bare ``lr<=0.01`` finds them like a config's) and its tags
  as ``tags.<name>``, each value the string the client sent (MLflow's own limits, checked there).

Each row keeps the JSON value plus a number (numbers and bools) and a text (strings) column, so
a runs list can sort and filter by a param in SQL. Everything reported is hostile: at most
MAX_REPORTED keys per run, keys of at most 255 characters, values of at most MAX_VALUE_CHARS
characters (longer ones are cut and end in "…"); no NUL reaches the database.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from app.metrics.ingest import clip_key
from app.runs.models import RunParam

CONFIG = "config"
REPORTED = "reported"
SCRIPT = "script"
SCRIPT_PREFIX = "params."
REPORTED_PREFIX = "hparams."
MAX_REPORTED = 256
MAX_VALUE_CHARS = 1000
TEXT_CHARS = 255


class ParamLimit(enum.Enum):
    """What ``record_reported`` left out or changed, for the run's log."""

    TOO_MANY = "too many"  # keys past MAX_REPORTED were dropped
    CUT = "cut"  # a value longer than MAX_VALUE_CHARS was cut


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"params": {"lr": 0.1}, "seed": 3}`` -> ``{"params.lr": 0.1, "seed": 3}``; lists and
    scalars are leaves, an empty object leaves nothing."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _clean(text: str) -> str:
    return text.replace("\x00", "\ufffd")


def _row(run_id: int, key: str, value: Any, source: str) -> tuple[dict[str, Any], bool]:
    """The row of one param, and whether its value had to be cut."""
    number: float | None = None
    text: str | None = None
    cut = False
    if isinstance(value, bool):
        number = float(value)
    elif isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:
            number = None
        if number is None or not math.isfinite(number):
            value, number = None, None
    elif value is not None:
        if not isinstance(value, str):  # a list (config `args`): JSON, kept whole when short
            try:
                dumped = json.dumps(value, default=str, allow_nan=False)
                value = json.loads(dumped) if len(dumped) <= MAX_VALUE_CHARS else dumped
            except ValueError:  # NaN inside: as text
                value = str(value)
        if isinstance(value, str):
            value = _clean(value)
            if len(value) > MAX_VALUE_CHARS:
                value, cut = value[: MAX_VALUE_CHARS - 1] + "…", True
            text = value[:TEXT_CHARS]
    row = {
        "run_id": run_id,
        "key": clip_key(key),  # NUL replaced, at most 255 characters
        "source": source,
        "value": value,
        "value_num": number,
        "value_text": text,
    }
    return row, cut


def record_config(session: Session, *, run_id: int, config: Mapping[str, Any]) -> None:
    """The launch config's params of a run just created (its keys are the validated config's:
    bounded by app.experiments.config)."""
    rows = [_row(run_id, k, v, CONFIG)[0] for k, v in flatten(config).items()]
    if rows:
        session.execute(insert(RunParam), rows)


def _bounded(
    run_id: int, items: Iterable[tuple[str, Any]], source: str, known: set[str]
) -> tuple[dict[str, dict[str, Any]], set[ParamLimit]]:
    """The rows of ``items`` (key -> value) under the caps: at most MAX_REPORTED keys with
    ``known`` (those the run holds of this source), values cut at MAX_VALUE_CHARS."""
    limits: set[ParamLimit] = set()
    wanted: dict[str, dict[str, Any]] = {}
    for key, value in items:  # a hostile report may name 100k: never all queried
        if key not in known and key not in wanted and len(known) + len(wanted) >= MAX_REPORTED:
            limits.add(ParamLimit.TOO_MANY)
            continue
        row, cut = _row(run_id, key, value, source)
        wanted[key] = row
        if cut:
            limits.add(ParamLimit.CUT)
    return wanted, limits


def _replace(session: Session, run_id: int, wanted: Mapping[str, dict[str, Any]]) -> None:
    if wanted:
        session.execute(delete(RunParam).where(RunParam.run_id == run_id, RunParam.key.in_(wanted)))
        session.execute(insert(RunParam), list(wanted.values()))


def record_reported(session: Session, *, run_id: int, values: Mapping[str, Any]) -> set[ParamLimit]:
    """Upsert hparams the job reported (name -> number, string or bool); returns the caps hit."""
    if not values:
        return set()
    session.flush()
    reported = RunParam.run_id == run_id, RunParam.source == REPORTED
    known = set(session.scalars(select(RunParam.key).where(*reported)))  # at most MAX_REPORTED
    items = ((clip_key(REPORTED_PREFIX + name), value) for name, value in values.items())
    wanted, limits = _bounded(run_id, items, REPORTED, known)
    # A config key never collides: reported keys all start with "hparams.", config keys never
    # do (the config's top-level keys are fixed by app.experiments.config).
    _replace(session, run_id, wanted)
    return limits


def number_of(text: str) -> float | None:
    """The number a logged string spells ("0.01", "3"), for sorting and filtering in SQL."""
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def record_logged(session: Session, *, run_id: int, values: Mapping[str, str], source: str) -> None:
    """Upsert string values logged from outside under their keys (already checked and bounded
    by the caller); the text keeps the value as sent, the number what it spells."""
    if not values:
        return
    rows = [
        {
            "run_id": run_id,
            "key": clip_key(key),
            "source": source,
            "value": _clean(value),
            "value_num": number_of(value),
            "value_text": _clean(value)[:TEXT_CHARS],
        }
        for key, value in values.items()
    ]
    keys = [r["key"] for r in rows]
    session.execute(delete(RunParam).where(RunParam.run_id == run_id, RunParam.key.in_(keys)))
    session.execute(insert(RunParam), rows)


def forget(session: Session, *, run_id: int, keys: Iterable[str]) -> int:
    """Remove the run's params under ``keys``; how many there were."""
    result = session.execute(
        delete(RunParam).where(RunParam.run_id == run_id, RunParam.key.in_(list(keys)))
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def params_by_run(session: Session, run_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """Each run's params as one flat dict (key order: config first, then reported, by key)."""
    ids = list(run_ids)
    found: dict[int, dict[str, Any]] = {i: {} for i in ids}
    if not ids:
        return found
    stmt = (
        select(RunParam.run_id, RunParam.key, RunParam.value)
        .where(RunParam.run_id.in_(ids))
        .order_by(RunParam.run_id, RunParam.source, RunParam.key)
    )
    for run_id, key, value in session.execute(stmt):
        found[run_id][key] = value
    return found


def record_script(
    session: Session, *, run_id: int, values: Mapping[str, Any]
) -> tuple[dict[str, tuple[Any, Any]], set[ParamLimit]]:
    """Upsert the script's own config (dotted keys, taken as under ``params.``) where the launch
    config has no such key; returns the keys whose script value differs from the launch's
    (key -> (launch value, script value)) and the caps hit (MAX_REPORTED keys per source)."""
    differing: dict[str, tuple[Any, Any]] = {}
    if not values:
        return differing, set()
    session.flush()
    held = {
        key: (source, value)
        for key, source, value in session.execute(
            select(RunParam.key, RunParam.source, RunParam.value).where(
                RunParam.run_id == run_id, RunParam.source.in_((CONFIG, SCRIPT))
            )
        )
    }
    items = []
    for name, value in values.items():
        key = clip_key(SCRIPT_PREFIX + name)
        source, launch = held.get(key, (None, None))
        if source != CONFIG:
            items.append((key, value))
        elif launch != (script := _row(run_id, key, value, SCRIPT)[0]["value"]):
            differing[key] = (launch, script)
    known = {key for key, (source, _value) in held.items() if source == SCRIPT}
    wanted, limits = _bounded(run_id, items, SCRIPT, known)
    _replace(session, run_id, wanted)
    return differing, limits
