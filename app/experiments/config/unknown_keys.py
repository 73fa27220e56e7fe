"""Unknown config keys named, with the key meant (issue 41: a misspelled ``scirpt:`` was
reported as "unknown or missing recipe ... in the workspace", a mistyped ``sed`` as pydantic's
bare "Extra inputs are not permitted").

``unknown_keys``: a config with neither ``recipe`` nor ``script`` whose keys include ones no
config model has: each is its own error, ``unknown key 'scirpt': did you mean script?``.
``extra_message``: the words for pydantic's ``extra_forbidden`` at a location, with the
nearest field of the model found there (``resources.gpu`` -> ``gpus``).
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Sequence
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

from app.experiments.config.model import CONFIG_MODELS, SCRIPT_TAG


def top_level_keys() -> set[str]:
    """Every key some config's top level takes (the recipe's and the script's)."""
    keys = {"recipe", SCRIPT_TAG}
    for model in CONFIG_MODELS.values():
        keys |= set(model.model_fields)
    return keys


def nearest(key: str, known: Sequence[str] | set[str]) -> str | None:
    """The known key closest to ``key`` (any case), None when none is near."""
    lowered = {k.lower(): k for k in sorted(known)}
    close = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[close[0]] if close else None


def unknown_key_text(key: str, known: Sequence[str] | set[str]) -> str:
    near = nearest(key, known)
    return f"unknown key {key!r}" + (f": did you mean {near}?" if near else "")


def unknown_keys(raw: Any) -> list[str]:
    """The keys of a config without a recipe or a script that no config takes (in order)."""
    if not isinstance(raw, dict) or "recipe" in raw or SCRIPT_TAG in raw:
        return []
    known = top_level_keys()
    return [k for k in raw if isinstance(k, str) and k not in known]


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType):
        for arg in get_args(annotation):
            found = _model_of(arg)
            if found is not None:
                return found
    return None


def fields_at(tag: str | None, path: Sequence[Any]) -> set[str]:
    """The field names of the model at ``path`` under the config model ``tag`` (empty when the
    path leaves the models: a dict of params, a list)."""
    model: type[BaseModel] | None = CONFIG_MODELS.get(tag) if tag else None
    if model is None:
        return top_level_keys() if not path else set()
    for part in path:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        model = _model_of(field.annotation) if field is not None else None
        if model is None:
            return set()
    return set(model.model_fields)


def extra_message(tag: str | None, loc: Sequence[Any]) -> str | None:
    """``unknown key 'gpu': did you mean gpus?`` for an extra_forbidden at ``loc`` (its last
    part the key), None when the key is not a text."""
    if not loc or not isinstance(loc[-1], str):
        return None
    return unknown_key_text(loc[-1], fields_at(tag, loc[:-1]))
