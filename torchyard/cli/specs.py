"""Reading what `torchyard submit` sends: a spec file plus `--set key=value` edits.

A file is either an experiment spec `{name, description?, config: {...}}` or a bare config
(`{recipe, params, seed, resources, ...}`, named after the file). Values are YAML, with one
fix: PyYAML follows YAML 1.1, where `1e-3` is a *string*; the server validates params
strictly (a string is not a float), so exponent floats without a dot are read as floats here.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class SpecError(Exception):
    """The file or a --set value cannot be turned into a request; the message says why."""


class _Loader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no type hints
    """SafeLoader that also reads `1e-3` and `5E+2` as floats."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_value(text: str) -> Any:
    """A --set value as a YAML scalar: `0.01` float, `3` int, `true` bool, `adam` string."""
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as e:
        raise SpecError(f"cannot parse the value {text!r}: {e}") from e


def apply_set(config: dict[str, Any], assignment: str) -> None:
    """Apply one `dotted.key=value` to `config` in place, creating missing mappings."""
    key, sep, raw = assignment.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise SpecError(f"--set {assignment!r}: expected dotted.key=value, e.g. params.lr=0.01")
    node = config
    for depth, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            where = ".".join(parts[: depth + 1])
            raise SpecError(f"--set {assignment!r}: {where} is {child!r}, not a mapping")
        node = child
    node[parts[-1]] = parse_value(raw)


def apply_sets(config: dict[str, Any], assignments: list[str]) -> dict[str, Any]:
    """A copy of `config` with every assignment applied in order (a later one wins)."""
    result = copy.deepcopy(config)
    for assignment in assignments:
        apply_set(result, assignment)
    return result


@dataclass
class Spec:
    name: str
    description: str
    config: dict[str, Any]


def read_document(path: Path) -> Any:
    """The parsed file: JSON for .json (exact error positions), YAML otherwise."""
    try:
        text = path.read_text()
    except OSError as e:
        raise SpecError(f"cannot read {path}: {e.strerror or e}") from e
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text)
        return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: no arbitrary objects
    except (ValueError, yaml.YAMLError) as e:
        raise SpecError(f"{path} is not valid {path.suffix.lstrip('.') or 'YAML'}: {e}") from e


def to_spec(document: Any, *, default_name: str) -> Spec:
    """An experiment spec if the document has a `config` mapping, else a bare config."""
    if not isinstance(document, dict):
        raise SpecError("the file must hold a mapping: an experiment spec or a config")
    if "config" in document:
        unknown = set(document) - {"name", "description", "config"}
        if unknown:
            raise SpecError(
                f"unknown key(s) in the experiment spec: {', '.join(sorted(unknown))} "
                "(expected name, description, config)"
            )
        config = document["config"]
        if not isinstance(config, dict):
            raise SpecError("`config` in the experiment spec must be a mapping")
        name = document.get("name") or default_name
        description = document.get("description") or ""
        if not isinstance(name, str) or not isinstance(description, str):
            raise SpecError("`name` and `description` must be strings")
        return Spec(name=name, description=description, config=config)
    return Spec(name=default_name, description="", config=document)


def read_spec(path: Path) -> Spec:
    return to_spec(read_document(path), default_name=path.stem)
