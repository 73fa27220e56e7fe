"""The run config's models: one pydantic model per recipe (from the catalog) and the script's,
joined by a discriminated union on `recipe`, every default here; ``run_config`` gives a
stored config's typed model back (app.experiments.config says why).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from app.experiments.environment import Environment
from app.experiments.resources import Resources
from app.experiments.workspace import MAX_DIFF_BYTES
from torchyard.contract import WORKER_SET_VARS, RunSpec, is_loader_variable, is_server_variable
from torchyard.recipes.catalog import RECIPES, Param, Recipe

MAX_SEED = 2**32 - 1


class CheckpointRetention(BaseModel):
    """Which of a run's checkpoints stay on disk as it goes (app.runs.files.checkpoint_records): the
    newest ``keep_last``, the ``keep_best`` best by ``metric`` (its value at the checkpoint's
    step), and ``final.pt`` always. The default keeps the latest two, and the best one once a metric
    is named (Determined's default)."""

    model_config = ConfigDict(extra="forbid")

    keep_last: int = Field(2, ge=1, le=10_000, description="the newest checkpoints kept")
    keep_best: int = Field(
        1, ge=0, le=10_000, description="the best checkpoints by `metric` kept (with a metric)"
    )
    metric: str | None = Field(
        None,
        min_length=1,
        max_length=255,
        pattern=r"^[^\x00]*$",
        description="the metric key that ranks checkpoints, e.g. val/acc",
    )
    mode: Literal["max", "min"] = Field("max", description="whether a larger metric is better")


EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=100)]
EnvValue = Annotated[str, Field(max_length=4096, pattern=r"^[^\x00]*$")]


class RunConfig(BaseModel):
    """What every run config has, recipe or script (each a subclass: ``run_config``)."""

    model_config = ConfigDict(extra="forbid")

    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="omit for a random seed")
    deterministic: bool = False
    resources: Resources = Field(default_factory=Resources)
    max_restarts: int = Field(
        0,
        ge=0,
        le=10,
        description="times a run whose worker was lost or shut down is requeued, resuming "
        "from its last checkpoint",
    )
    checkpoints: CheckpointRetention = Field(default_factory=CheckpointRetention)
    environment: Environment = Field(default_factory=Environment)
    env: dict[EnvName, EnvValue] = Field(
        default_factory=dict,
        max_length=100,
        description="environment variables of the job (HF_HUB_OFFLINE, WANDB_MODE, ...); "
        "not the service's own (TORCHYARD_*, credential-like names), the loader's or libc's "
        "(LD_*, GCONV_PATH, MALLOC_*, ...) nor what the worker sets; they reach the job's own "
        "processes only, after the privilege drop",
    )

    @field_validator("env")
    @classmethod
    def _env_is_the_runs(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if is_loader_variable(name):
                raise ValueError(
                    f"{name}: the dynamic loader's and libc's variables cannot be set by a run "
                    "(they change how every program loads, privileged ones included)"
                )
            if is_server_variable(name):
                raise ValueError(f"{name}: the service's own variables cannot be set by a run")
            if name.upper() in WORKER_SET_VARS:
                raise ValueError(f"{name}: set by the worker for every job")
        return env

    def run_spec(self) -> RunSpec:
        """How to launch it, for code that takes no pydantic model (torchyard.contract)."""
        return RunSpec(
            nodes=self.resources.nodes,
            nproc=self.resources.nproc,
            gpus=self.resources.gpus,
            max_restarts=self.max_restarts,
            launcher=self.resources.launcher,
        )

    def stored(self) -> dict[str, Any]:
        """The JSON a run stores, the API answers and the job reads (defaults filled in); a
        workspace script's config has no ``code`` or ``code_origin`` key, one without
        variables no ``env``, and a single-host one no ``resources.nodes``, as before they
        existed."""
        dumped: dict[str, Any] = self.model_dump(mode="json")
        if not dumped.get("env"):
            dumped.pop("env", None)
        if dumped["resources"]["nodes"] == 1:
            del dumped["resources"]["nodes"]
        for key in ("code", "code_origin"):
            if key in dumped and dumped[key] is None:
                del dumped[key]
        return dumped


def _param_field(param: Param) -> tuple[Any, Any]:
    if param.choices:
        return Literal[param.choices], Field(param.default, description=param.help)
    constraints: dict[str, Any] = {
        k: v for k, v in (("ge", param.ge), ("gt", param.gt), ("le", param.le)) if v is not None
    }
    # strict: "10" is not an int and true is not a number; strict floats still take ints.
    return param.kind, Field(param.default, description=param.help, strict=True, **constraints)


def _params_model(recipe: Recipe) -> type[BaseModel]:
    fields: dict[str, Any] = {p.name: _param_field(p) for p in recipe.params}
    return create_model(
        f"{recipe.name.title().replace('_', '')}Params",
        __config__=ConfigDict(extra="forbid"),
        **fields,
    )


def _recipe_config_model(recipe: Recipe) -> type[RunConfig]:
    params_model = _params_model(recipe)
    return create_model(
        f"{recipe.name.title().replace('_', '')}Config",
        __base__=RunConfig,
        __doc__=recipe.description,
        recipe=(Literal[recipe.name], ...),  # type: ignore[arg-type]
        params=(params_model, Field(default_factory=params_model)),
    )


RECIPECONFIG_MODELS: dict[str, type[RunConfig]] = {
    name: _recipe_config_model(recipe) for name, recipe in RECIPES.items()
}

SCRIPT_TAG = "script"
ParamName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$", max_length=100)]
# Smart-mode union: true stays a bool, 3 an int, 0.5 a float, "3" a string.
ParamValue = bool | int | float | Annotated[str, Field(max_length=1000)]


DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"  # app.code.store's, without importing the server


class CodeOrigin(BaseModel):
    """Where an uploaded snapshot came from: the client's git state when it packed it (shown
    as the run's git state, instead of the server workspace's)."""

    model_config = ConfigDict(extra="forbid")

    commit: str | None = Field(None, max_length=100)
    branch: str | None = Field(None, max_length=255)
    remote: str | None = Field(None, max_length=2000)
    dirty: bool = False
    diff: str = Field("", description=f"uncommitted changes, at most {MAX_DIFF_BYTES} bytes")
    diff_truncated: bool = False

    @model_validator(mode="after")
    def _diff_capped(self) -> CodeOrigin:
        size = len(self.diff.encode("utf-8", "surrogatepass"))
        if size > MAX_DIFF_BYTES:
            raise ValueError(
                f"diff is {size} bytes; cut it to {MAX_DIFF_BYTES} and set diff_truncated"
            )
        return self


class ScriptConfig(RunConfig):
    """A user script from the workspace, or from an uploaded code snapshot (``code``),
    started exactly like a built-in recipe."""

    script: str = Field(
        min_length=1,
        max_length=500,
        description="path of a .py file relative to the workspace directory, or to the code "
        "snapshot when `code` is given",
        examples=["train.py"],
    )
    code: str | None = Field(
        None,
        pattern=DIGEST_PATTERN,
        description="a code snapshot's digest (POST /api/code): the job runs in a fresh copy "
        "of it, in the script's folder",
        examples=["sha256:" + "0" * 64],
    )
    code_origin: CodeOrigin | None = Field(
        None, description="the client's git state when it packed `code` (only with `code`)"
    )
    args: list[Annotated[str, Field(max_length=1000)]] = Field(
        default_factory=list, max_length=256, description="command-line arguments, as given"
    )
    params: dict[ParamName, ParamValue] = Field(
        default_factory=dict,
        max_length=256,
        description="passed after args as --key=value flags (true: --key, false: left out)",
    )

    @model_validator(mode="after")
    def _origin_needs_code(self) -> ScriptConfig:
        if self.code_origin is not None and self.code is None:
            raise ValueError("code_origin describes a code snapshot: give `code` too")
        return self


SESSION_TAG = "session"
MAX_SESSION_HOURS = 168


class SessionSpec(BaseModel):
    """An interactive session's own part (app/sessions): how long it may hold its GPUs."""

    model_config = ConfigDict(extra="forbid")

    hours: float = Field(
        4, gt=0, le=MAX_SESSION_HOURS, description="the session's time limit in hours"
    )


class SessionConfig(RunConfig):
    """A run of kind session: JupyterLab in the job's sandbox instead of a training script
    (worker/session_job.py), reached through torchyard only (app/sessions)."""

    session: SessionSpec = Field(default_factory=SessionSpec)
    code: str | None = Field(
        None,
        pattern=DIGEST_PATTERN,
        description="a code snapshot's digest (POST /api/code): its files are the session's "
        "work folder",
    )


def config_code(config: RunConfig) -> str | None:
    """The code snapshot a run's config names (a script's or a session's), if any."""
    return config.code if isinstance(config, ScriptConfig | SessionConfig) else None


def _config_tag(value: Any) -> str | None:
    if isinstance(value, dict):
        if SCRIPT_TAG in value:
            return SCRIPT_TAG
        if SESSION_TAG in value:
            return SESSION_TAG
        recipe = value.get("recipe")
        return recipe if isinstance(recipe, str) else None
    if isinstance(value, ScriptConfig):
        return SCRIPT_TAG
    if isinstance(value, SessionConfig):
        return SESSION_TAG
    return getattr(value, "recipe", None)


CONFIG_MODELS: dict[str, type[RunConfig]] = {
    **RECIPECONFIG_MODELS,
    SCRIPT_TAG: ScriptConfig,
    SESSION_TAG: SessionConfig,
}

ExperimentConfig: Any = Annotated[
    Union[tuple(Annotated[m, Tag(n)] for n, m in CONFIG_MODELS.items())],  # noqa: UP007
    Discriminator(
        _config_tag,
        custom_error_type="unknown_recipe",
        custom_error_message="unknown or missing recipe; give a built-in recipe ("
        + ", ".join(sorted(RECIPES))
        + ") or a script path in the workspace",
        custom_error_context={"recipes": ", ".join(sorted(RECIPES))},
    ),
]

CONFIG_ADAPTER: TypeAdapter[Any] = TypeAdapter(ExperimentConfig)


def run_config(stored: Mapping[str, Any]) -> RunConfig:
    """The typed model of a config ``validate_config`` returned (a run's or experiment's
    stored ``config``): a recipe's config or a ScriptConfig.

    A row stored by an older server (a recipe since renamed, a param since removed) still
    gives its common part, a plain RunConfig with this model's defaults for what it lacks, so
    a page or the scheduler never fails on an old run; only a common part that is itself
    invalid raises (pydantic's ValidationError, a ValueError)."""
    try:
        model: RunConfig = CONFIG_ADAPTER.validate_python(stored)
    except ValidationError:
        common = {k: v for k, v in stored.items() if k in RunConfig.model_fields}
        return RunConfig.model_validate(common)
    return model


def with_seed(config: dict[str, Any]) -> dict[str, Any]:
    """The config a run uses: a random seed is drawn once, here, and recorded."""
    if config.get("seed") is None:
        return {**config, "seed": secrets.randbelow(MAX_SEED)}
    return config


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
