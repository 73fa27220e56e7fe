"""A config checked as the API receives it (``validate_config``): the models' rules, then a
script's path in this server's workspace, or the code snapshot it names (it exists, holds the
script, and its requirements.txt passes the config's rules); every error a field error under
the caller's prefix (``ConfigInvalid``, a 422).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.code.scripts import script_in_snapshot
from app.code.service import use
from app.errors import FieldError, Invalid, field_error
from app.experiments.config.model import (
    CONFIG_ADAPTER,
    CONFIG_MODELS,
    SCRIPT_TAG,
    RunConfig,
    ScriptConfig,
    SessionConfig,
)
from app.experiments.config.unknown_keys import (
    extra_message,
    top_level_keys,
    unknown_key_text,
    unknown_keys,
)
from app.experiments.requirements import RequirementRefused, check_requirements_file
from app.experiments.workspace import ScriptPathError, resolve_script
from app.settings import get_settings

EXTRA = "extra_forbidden"  # pydantic's type for an unknown key, ours too


class ConfigInvalid(Invalid):
    """Config errors, with locations under the caller's prefix: a 422 like any Invalid
    (app.http_errors), so a service lets it through; the sweeps catch it to say it their way."""


def validate_config(
    raw: Any, *, loc_prefix: tuple[str | int, ...], session: Session | None = None
) -> dict[str, Any]:
    """Return the complete config (defaults filled in) as plain JSON, or raise ConfigInvalid.

    A script must also be a .py file inside this server's workspace (app.experiments.workspace), or,
    with ``code``, a file of that stored snapshot (looked up in ``session``)."""
    if isinstance(raw, dict) and SCRIPT_TAG in raw and "recipe" in raw:
        raise ConfigInvalid(
            [
                field_error(
                    [*loc_prefix, "script"],
                    "give either a recipe or a script, not both",
                    raw[SCRIPT_TAG],
                    kind="recipe_and_script",
                )
            ]
        )
    unknown = unknown_keys(raw)  # a misspelled script or recipe among them: say that first
    if unknown:
        known = top_level_keys()
        raise ConfigInvalid(
            [
                field_error([*loc_prefix, k], unknown_key_text(k, known), raw[k], kind=EXTRA)
                for k in unknown
            ]
        )
    try:
        model: RunConfig = CONFIG_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        raise ConfigInvalid(
            [_error(e, loc_prefix) for e in exc.errors(include_url=False)]
        ) from None
    if isinstance(model, ScriptConfig):
        try:
            if model.code is None:
                resolve_script(get_settings().workspace_dir, model.script)
            else:
                _check_code(model, session, loc_prefix)
        except ScriptPathError as exc:
            raise ConfigInvalid(
                [field_error([*loc_prefix, SCRIPT_TAG], str(exc), model.script, kind="script_path")]
            ) from None
    if isinstance(model, SessionConfig) and model.code is not None:
        _check_code(model, session, loc_prefix)
    return model.stored()


def _check_code(
    model: ScriptConfig | SessionConfig, session: Session | None, loc: tuple[str | int, ...]
) -> None:
    """The snapshot exists (422 naming ``code``), holds the script (ScriptPathError), and its
    requirements.txt passes the config's rules (422 naming ``code``, the file and the line)."""
    assert model.code is not None
    used = use(session, model.code) if session is not None else None
    if used is None:
        raise ConfigInvalid(
            [
                field_error(
                    [*loc, "code"],
                    f"no code snapshot {model.code} on this server: upload it with "
                    "POST /api/code (torchyard submit --code DIR does) and use the digest "
                    "it answers",
                    model.code,
                    kind="code_unknown",
                )
            ]
        )
    if isinstance(model, ScriptConfig):
        script_in_snapshot(model.script, used.files, model.code)
    if used.requirements is not None:
        try:
            check_requirements_file(
                used.requirements, source=f"requirements.txt in code snapshot {model.code}"
            )
        except RequirementRefused as exc:
            raise ConfigInvalid(
                [field_error([*loc, "code"], str(exc), model.code, kind="code_requirements")]
            ) from None


def _error(err: Any, loc_prefix: tuple[str | int, ...]) -> FieldError:
    loc = list(err["loc"])
    tag = None
    if loc and loc[0] in CONFIG_MODELS:
        tag, loc = loc[0], loc[1:]  # the union's tag: the user wrote no such key
    if err["type"] == "unknown_recipe":
        loc = ["recipe"]
    message = err["msg"]
    if err["type"] == EXTRA:
        message = extra_message(tag, loc) or message
    return field_error([*loc_prefix, *loc], message, err.get("input"), kind=err["type"])
