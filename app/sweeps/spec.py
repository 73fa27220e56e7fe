"""A sweep spec checked against its experiment, every problem a 422 error under its field.

What pydantic cannot know: whether a parameter's path is a key the experiment's config
accepts (each candidate value is merged into the experiment's config and the whole config
validated, exactly as a run's overrides are: so `params.lr` of a recipe must be a declared
param within its bounds, and a script takes any `params.<name>`), the relations between
fields (min < max, a log range above 0, a grid over countable points), the budget cap, and
for a built-in recipe whether the metric is one the recipe logs.
"""

from __future__ import annotations

import math
from typing import Any

from app.errors import FieldError, field_error
from app.experiments.config.model import deep_merge
from app.experiments.config.validate import ConfigInvalid, validate_config
from app.settings import get_settings
from app.sweeps.schemas import ParameterSpec, SweepCreate
from torchyard.field_location import location_text
from torchyard.recipes.catalog import METRIC_KEYS

# Not sweepable: they choose what runs, not how (a sweep compares one program's settings).
FIXED_KEYS = frozenset({"recipe", "script", "code"})

Error = FieldError


def _error(loc: list[str | int], msg: str, value: Any, kind: str = "value_error") -> Error:
    return field_error(["body", *loc], msg, value, kind=kind)


def nested(path: str, value: Any) -> dict[str, Any]:
    """ "params.lr", 0.1 -> {"params": {"lr": 0.1}}: an override of the experiment's config."""
    out: Any = value
    for part in reversed(path.split(".")):
        out = {part: out}
    return dict(out)


def spec_errors(data: SweepCreate, *, base_config: dict[str, Any]) -> list[Error]:
    """Every problem of the spec at once (a form shows them all next to their fields)."""
    errors: list[Error] = []
    cap = get_settings().sweep_max_runs
    if data.max_runs > cap:
        errors.append(
            _error(["max_runs"], f"at most {cap} trials per sweep (got {data.max_runs})", cap)
        )
    for path, spec in data.parameters.items():
        errors.extend(_parameter_errors(path, spec, data.method, base_config))
    if "recipe" in base_config and data.metric.name not in METRIC_KEYS:
        errors.append(
            _error(
                ["metric", "name"],
                f"recipe {base_config['recipe']} never logs {data.metric.name!r}; "
                f"it logs {', '.join(METRIC_KEYS)}",
                data.metric.name,
            )
        )
    return errors


def _parameter_errors(
    path: str, spec: ParameterSpec, method: str, base_config: dict[str, Any]
) -> list[Error]:
    loc: list[str | int] = ["parameters", path]
    parts = path.split(".")
    if any(not p for p in parts):
        return [_error(loc, f"{path!r} is not a config path (empty part)", path)]
    if parts[0] in FIXED_KEYS:
        return [_error(loc, f"{parts[0]} is fixed by the experiment; a sweep cannot vary it", path)]
    shape = _shape_errors(loc, spec, method)
    if shape:
        return shape
    candidates: list[Any] = (
        list(spec.values)
        if spec.values is not None
        else [_as_int(spec.min), _as_int(spec.max)]
        if spec.distribution == "int_uniform"
        else [spec.min, spec.max]
    )
    for value in candidates:
        try:
            validate_config(deep_merge(base_config, nested(path, value)), loc_prefix=())
        except ConfigInvalid as exc:
            return [_config_error(loc, path, value, exc.errors[0])]
    return []


def _shape_errors(loc: list[str | int], spec: ParameterSpec, method: str) -> list[Error]:
    if (spec.values is None) == (spec.distribution is None):
        return [_error(loc, "give either values or a distribution (with min and max)", None)]
    if spec.values is not None:
        if spec.min is not None or spec.max is not None:
            return [_error([*loc, "values"], "values take no min or max", spec.values)]
        if len({repr(v) for v in spec.values}) != len(spec.values):
            return [_error([*loc, "values"], "values must be distinct", spec.values)]
        return []
    errors = []
    for bound in ("min", "max"):
        value = getattr(spec, bound)
        if value is None:
            errors.append(_error([*loc, bound], f"{spec.distribution} needs {bound}", None))
        elif not math.isfinite(value):
            errors.append(_error([*loc, bound], f"{bound} must be a finite number", None))
    if errors:
        return errors
    assert spec.min is not None and spec.max is not None
    if spec.min >= spec.max:
        return [
            _error([*loc, "min"], f"min ({spec.min:g}) must be below max ({spec.max:g})", spec.min)
        ]
    if spec.distribution == "log_uniform" and spec.min <= 0:
        return [_error([*loc, "min"], f"log_uniform needs min > 0 (got {spec.min:g})", spec.min)]
    if spec.distribution == "int_uniform":
        for bound in ("min", "max"):
            if _as_int(getattr(spec, bound)) is None:
                value = getattr(spec, bound)
                return [_error([*loc, bound], "int_uniform needs a whole number", value)]
    elif method == "grid":
        return [
            _error(
                [*loc, "distribution"],
                f"a grid cannot enumerate a continuous {spec.distribution} range: give values "
                "(or an int_uniform range)",
                spec.distribution,
            )
        ]
    return []


def _as_int(value: float | None) -> int | None:
    return int(value) if value is not None and float(value).is_integer() else None


def _config_error(loc: list[str | int], path: str, value: Any, err: Error) -> Error:
    where = location_text(err["loc"])
    if err["type"] == "extra_forbidden":
        msg = f"unknown config path {path!r}: the experiment's config has no {where}"
    else:
        msg = f"{path} = {value!r} is not a valid config: {where}: {err['msg']}"
    return _error(loc, msg, value, "config_path")
