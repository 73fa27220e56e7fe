"""What a line of a job's metrics spool may be, and why one is refused.

The spool is written by the job, someone's code: any line may be anything. A line that is not
one of the record types below, well formed, is skipped and counted on the run by reason
(app.runs.state.notices); the lines around it are kept. Nothing in a line can make the batch fail:
every value that reaches the database was checked here first (a key it cannot store, a step
beyond its 64-bit column, text that is not UTF-8).

    {"type": "metrics", "step": int64, "time": finite number,
     "values": {key: number|null|"Infinity"|"-Infinity"}}
    {"type": "checkpoint", "name": str, "path": str, "epoch": int32, "step": int64,
     "size_bytes": int64 >= 0, ...}
    {"type": "params", "values": {name: string|number|bool}}
    {"type": "config", "values": {name: JSON value, nested}}

A params line is what an MLflow client inside the job logged as params
(torchyard.mlflow_store): stored as the run's reported params, like TensorBoard hparams
(``hparams.<name>``, app.runs.query.params.record_reported, which bounds their count and size).
A config line is the script's ``torchyard.init(config=...)``: flattened to dotted keys as the
launch config is and stored as the run's params ``params.<key>`` beside the launch's, which win
(app.runs.query.params.record_script).

A key is 1-255 characters of valid text (no lone surrogate, no NUL), not under `sys/` (the
worker's system series, worker/system_metrics.py: a job must not forge or block them). A
value is a number, a bool (stored as 0/1), null (what the job writes for NaN, stored NULL) or
exactly one of the strings "Infinity" and "-Infinity" (what the job writes for +/-inf,
torchyard.contract.SPOOL_INF: stored as +/-inf); any other string refuses the line. NaN,
Infinity and -Infinity as bare tokens (not JSON, but a hand-written line, json.dumps with its
defaults, may carry them) read as null, +inf and -inf. Another ``type`` is ignored (a newer
job's record), not counted.

``parse_spool`` takes a chunk of whole lines the fast way (one orjson call for the chunk,
bulk type checks) and, when anything in it is off, line by line with ``check_line``.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import orjson

from app.metrics.ingest import MAX_KEY_LENGTH, Step
from app.runs.query.params import flatten
from app.runs.state.notices import size_text
from torchyard.contract import SPOOL_INFINITIES, SYSTEM_KEY_PREFIX

INT64 = (-(2**63), 2**63 - 1)
INT32 = (-(2**31), 2**31 - 1)
MAX_NAME = 255
MAX_PATH = 500

NOT_JSON = "not valid JSON"
NOT_OBJECT = "not a JSON object"
BAD_STEP = "step is not a whole number within 64 bits"
BAD_TIME = "time is not a finite number"
BAD_VALUES = "values is not an object"
BAD_KEY_LENGTH = f"a metric key is empty or longer than {MAX_KEY_LENGTH} characters"
BAD_KEY_TEXT = "a metric key is not valid text (a lone surrogate or NUL)"
BAD_VALUE = "a metric value is not a number"
RESERVED_KEY = f"a metric key under {SYSTEM_KEY_PREFIX} (the worker's system series)"


def too_long(limit: int) -> str:
    return f"longer than the spool line limit of {size_text(limit)}"


BAD_PARAMS = "a params line whose values are not an object of names to strings or numbers"


def bad_checkpoint(name: str) -> str:
    return f"a checkpoint line without a valid {name!r}"


class BadLine(ValueError):
    """A spool line refused; ``reason`` is one of the fixed texts above."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Parsed:
    steps: list[Step] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    # name -> value of the params lines, later lines winning
    params: dict[str, Any] = field(default_factory=dict)
    # dotted key -> value of the config lines (torchyard.init), flattened, later lines winning
    config: dict[str, Any] = field(default_factory=dict)
    # False only when every metrics value is finite (no null, no infinity): known for free on
    # the fast path (the set of value types), so the NaN/inf notification
    # (app.notifications.triggers) walks the lines only of a batch that has one.
    non_finite: bool = True


_NUMBER_TYPES = frozenset({float, int, bool, type(None)})


def _valid_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def check_key(key: Any) -> None:
    if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_LENGTH:
        raise BadLine(BAD_KEY_LENGTH)
    if not _valid_text(key):
        raise BadLine(BAD_KEY_TEXT)
    if key.startswith(SYSTEM_KEY_PREFIX):
        raise BadLine(RESERVED_KEY)


def _whole(value: Any, bounds: tuple[int, int]) -> bool:
    return type(value) is int and bounds[0] <= value <= bounds[1]


def _infinity(token: str) -> float:
    """+/-inf for exactly "Infinity"/"-Infinity"; BadLine for any other string."""
    infinity = SPOOL_INFINITIES.get(token)
    if infinity is None:
        raise BadLine(BAD_VALUE)
    return infinity


def _number(value: Any) -> float | None:
    """A value as stored: a float (+/-inf included), or None (null, NaN)."""
    if value is None:
        return None
    if type(value) is str:
        return _infinity(value)
    if type(value) not in _NUMBER_TYPES:
        raise BadLine(BAD_VALUE)
    try:
        number = float(value)
    except OverflowError:  # an integer past any float
        raise BadLine(BAD_VALUE) from None
    return None if number != number else number


def check_metrics(record: Mapping[str, Any]) -> Step:
    step: Any = record.get("step")
    when: Any = record.get("time")
    values = record.get("values")
    if not _whole(step, INT64):
        raise BadLine(BAD_STEP)
    if type(when) not in (int, float) or not math.isfinite(when):
        raise BadLine(BAD_TIME)
    if not isinstance(values, dict):
        raise BadLine(BAD_VALUES)
    for key in values:
        check_key(key)
    return step, float(when), {key: _number(value) for key, value in values.items()}


def check_checkpoint(record: Mapping[str, Any]) -> dict[str, Any]:
    for name, limit in (("name", MAX_NAME), ("path", MAX_PATH)):
        text = record.get(name)
        if not isinstance(text, str) or not 0 < len(text) <= limit or not _valid_text(text):
            raise BadLine(bad_checkpoint(name))
    for name, bounds in (("epoch", INT32), ("step", INT64), ("size_bytes", (0, INT64[1]))):
        if not _whole(record.get(name), bounds):
            raise BadLine(bad_checkpoint(name))
    return dict(record)


_PARAM_TYPES = (str, int, float, bool)


def check_params(record: Mapping[str, Any]) -> dict[str, Any]:
    values = record.get("values")
    if not isinstance(values, dict):
        raise BadLine(BAD_PARAMS)
    for name, value in values.items():
        if not (isinstance(name, str) and _valid_text(name) and name):
            raise BadLine(BAD_PARAMS)
        if not isinstance(value, _PARAM_TYPES) or (
            isinstance(value, str) and not _valid_text(value)
        ):
            raise BadLine(BAD_PARAMS)
    return {"type": "params", "values": values}


BAD_CONFIG = "a config line whose values are not an object of names to JSON values"


def _valid_json_text(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (ValueError, TypeError, RecursionError):
        return False
    return True


MAX_CONFIG_DEPTH = 32


def _depth(value: Any) -> int:
    """How deep mappings nest in ``value`` (lists are leaves), without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict):
            deepest = max(deepest, level)
            if level <= MAX_CONFIG_DEPTH:
                todo.extend((v, level + 1) for v in item.values())
    return deepest


def check_config(record: Mapping[str, Any]) -> dict[str, Any]:
    """A config line's values, flattened to dotted keys (``{"opt": {"lr": 1}}`` -> ``opt.lr``);
    mappings nested deeper than MAX_CONFIG_DEPTH are refused (flattening recurses)."""
    values = record.get("values")
    if not isinstance(values, dict) or _depth(values) > MAX_CONFIG_DEPTH:
        raise BadLine(BAD_CONFIG)
    if not _valid_json_text(values):
        raise BadLine(BAD_CONFIG)
    flat = flatten(values)
    for name in flat:
        if not (name and _valid_text(name)):
            raise BadLine(BAD_CONFIG)
    return {"type": "config", "values": flat}


def _constant(name: str) -> float | None:
    """A bare NaN, Infinity or -Infinity token: None, +inf, -inf."""
    return SPOOL_INFINITIES.get(name)


def _load(raw: bytes) -> Any:
    """orjson, else the standard library's parser (NaN becomes None, Infinity +inf; a lone
    surrogate escape, which orjson refuses, parses and is then refused as text)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(raw, parse_constant=_constant)
    except (ValueError, RecursionError):
        raise BadLine(NOT_JSON) from None


def check_line(raw: bytes) -> Step | dict[str, Any] | None:
    """One spool line: a metrics Step, a checkpoint or params record, or None for another
    record type; BadLine(reason) for anything else."""
    record = _load(raw)
    if not isinstance(record, dict):
        raise BadLine(NOT_OBJECT)
    kind = record.get("type")
    if kind == "metrics":
        return check_metrics(record)
    if kind == "checkpoint":
        return check_checkpoint(record)
    if kind == "params":
        return check_params(record)
    if kind == "config":
        return check_config(record)
    return None


def _fast(chunk: bytes, lines: int) -> Parsed | None:
    """The whole chunk in one orjson call, checked in bulk; None when any line needs a
    closer look. Parsing line by line was the largest share of the forwarder's time
    (bench/ingest.py)."""
    try:
        records = orjson.loads(b"[" + chunk[:-1].replace(b"\n", b",") + b"]")
    except orjson.JSONDecodeError:
        return None
    if len(records) != lines or set(map(type, records)) != {dict}:
        return None
    metrics = [r for r in records if r.get("type") == "metrics"]
    try:
        steps_ = [r["step"] for r in metrics]
        times = [r["time"] for r in metrics]
        values = [r["values"] for r in metrics]
    except KeyError:
        return None
    kinds: set[type] = set()
    if metrics:
        if set(map(type, steps_)) != {int} or max(steps_) > INT64[1]:
            return None  # orjson gives ints down to -2**63 and up to 2**64 - 1
        if not set(map(type, times)) <= {int, float} or not all(map(math.isfinite, times)):
            return None
        if set(map(type, values)) != {dict}:
            return None
        kinds = set(map(type, chain.from_iterable(map(dict.values, values))))
        if not kinds <= _SPOOL_TYPES or (str in kinds and not _infinities(values)):
            return None
        try:
            for key in set(chain.from_iterable(values)):
                check_key(key)
        except BadLine:
            return None
    parsed = Parsed(
        steps=[(s, float(t), v) for s, t, v in zip(steps_, times, values, strict=True)],
        non_finite=not kinds.isdisjoint(_NON_FINITE_TYPES),
    )
    if len(metrics) != len(records):
        try:
            parsed.checkpoints = [
                check_checkpoint(r) for r in records if r.get("type") == "checkpoint"
            ]
            for r in records:
                if r.get("type") == "params":
                    parsed.params.update(check_params(r)["values"])
                elif r.get("type") == "config":
                    parsed.config.update(check_config(r)["values"])
        except BadLine:
            return None
    return parsed


_SPOOL_TYPES = _NUMBER_TYPES | {str}
_NON_FINITE_TYPES = frozenset({str, type(None)})


def _infinities(values: list[dict[str, Any]]) -> bool:
    """Replace the infinities' tokens among a chunk's values by +/-inf, in place; False when a
    string is not one (the line is then refused on the slow path)."""
    try:
        for line in values:
            for key, value in line.items():
                if type(value) is str:
                    line[key] = _infinity(value)
    except BadLine:
        return False
    return True


def parse_spool(chunk: bytes) -> Parsed:
    """The metrics lines (as (step, wall_time, values)), the checkpoint lines and the skipped
    lines by reason of a chunk of whole lines (each ending in a newline)."""
    fast = _fast(chunk, chunk.count(b"\n")) if chunk else Parsed()
    if fast is not None:
        return fast
    parsed = Parsed()
    for raw in chunk.split(b"\n")[:-1]:
        try:
            record = check_line(raw)
        except BadLine as bad:
            parsed.skipped[bad.reason] += 1
            continue
        if isinstance(record, tuple):
            parsed.steps.append(record)
        elif record is not None and record.get("type") == "params":
            parsed.params.update(record["values"])
        elif record is not None and record.get("type") == "config":
            parsed.config.update(record["values"])
        elif record is not None:
            parsed.checkpoints.append(record)
    return parsed
