"""Which values the next trial of a sweep gets: Optuna's samplers through ask-and-tell, on a
study rebuilt in memory from the sweep's trials each time.

Why rebuilt and not Optuna's RDB storage: the trials already are our runs (their params and
their metric in our own tables), so a second copy in Optuna's dozen tables would be a second
truth to keep in step, with its own migrations; a study of a few hundred trials rebuilds in
milliseconds. Restart-safe by construction: trial N is sampled from the trials
that had ended by then (seeded from (seed, N)), so nothing lives in a process's memory.

Grid: trial N is the grid's N-th point in the spec's order (the first parameter varies
slowest), so a grid sweep runs exactly its points, each once, whatever restarts happen; a
shuffled order would buy nothing with every point run anyway.
"""

from __future__ import annotations

import enum
import hashlib
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: Optuna (and numpy) would stay in every idle
    # worker and API process for nothing (tests/test_job_imports.py keeps numpy out of them)
    import optuna
    from optuna.distributions import BaseDistribution
    from optuna.trial import TrialState

MAX_SEED = 2**32 - 1


class State(enum.Enum):
    """How a trial ended, in Optuna's terms (TrialState of the same name)."""

    COMPLETE = "COMPLETE"  # the run succeeded with a value of the metric
    PRUNED = "PRUNED"  # stopped early (or cancelled): judged on its curve so far
    FAIL = "FAIL"  # failed, or ended without a value
    RUNNING = "RUNNING"  # queued or running

    @property
    def optuna(self) -> TrialState:
        from optuna.trial import TrialState

        return TrialState[self.value]


def _optuna() -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


@dataclass
class Observed:
    """A trial as a sampler or pruner sees it."""

    params: dict[str, Any]
    state: State
    value: float | None = None
    curve: dict[int, float] = field(default_factory=dict)  # step -> value (nan: non-finite)


def _grid_axis(spec: dict[str, Any]) -> list[Any]:
    if spec.get("values") is not None:
        return list(spec["values"])
    return list(range(int(spec["min"]), int(spec["max"]) + 1))  # int_uniform (spec.py)


def grid_size(parameters: dict[str, Any]) -> int:
    return math.prod(
        len(spec["values"])
        if spec.get("values") is not None
        else int(spec["max"] - spec["min"]) + 1
        for spec in parameters.values()
    )


def grid_point(parameters: dict[str, Any], number: int) -> dict[str, Any]:
    """The grid's `number`-th point, without building the grid (a mixed-radix count)."""
    point: dict[str, Any] = {}
    for path, spec in reversed(list(parameters.items())):
        axis = _grid_axis(spec)
        number, index = divmod(number, len(axis))
        point[path] = axis[index]
    return dict(reversed(list(point.items())))


def planned_runs(method: str, parameters: dict[str, Any], max_runs: int) -> int:
    return min(max_runs, grid_size(parameters)) if method == "grid" else max_runs


def distributions(parameters: dict[str, Any]) -> dict[str, BaseDistribution]:
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    out: dict[str, BaseDistribution] = {}
    for path, spec in parameters.items():
        if spec.get("values") is not None:
            out[path] = CategoricalDistribution(tuple(spec["values"]))
        elif spec["distribution"] == "int_uniform":
            out[path] = IntDistribution(int(spec["min"]), int(spec["max"]))
        else:
            log = spec["distribution"] == "log_uniform"
            out[path] = FloatDistribution(float(spec["min"]), float(spec["max"]), log=log)
    return out


def tpe_startup_trials(max_runs: int) -> int:
    """Random trials before TPE models: Optuna's 10 assumes budgets of a hundred; a sweep on a
    shared box is 10-50 trials, so a quarter of the budget (2 to 10)."""
    return max(2, min(10, max_runs // 4))


def sampler(method: str, *, seed: int, max_runs: int) -> optuna.samplers.BaseSampler:
    samplers = _optuna().samplers  # Any: optuna is imported lazily
    made: optuna.samplers.BaseSampler
    if method == "tpe":
        made = samplers.TPESampler(seed=seed, n_startup_trials=tpe_startup_trials(max_runs))
    else:
        made = samplers.RandomSampler(seed=seed)
    return made


def _fits(dist: BaseDistribution, value: Any) -> bool:
    try:
        return bool(dist._contains(dist.to_internal_repr(value)))
    except (ValueError, TypeError):
        return False


def study_of(
    observed: list[Observed],
    *,
    goal: str,
    parameters: dict[str, Any],
    sampler: optuna.samplers.BaseSampler | None = None,
    pruner: optuna.pruners.BasePruner | None = None,
) -> optuna.Study:
    """An in-memory study holding the ended trials (running ones are left to the caller)."""
    optuna = _optuna()
    from optuna.study import Study, StudyDirection
    from optuna.trial import create_trial

    direction = StudyDirection.MAXIMIZE if goal == "maximize" else StudyDirection.MINIMIZE
    study: Study = optuna.create_study(direction=direction, sampler=sampler, pruner=pruner)
    dists = distributions(parameters)
    for trial in observed:
        if trial.state is State.RUNNING:
            continue
        params = {k: v for k, v in trial.params.items() if k in dists}
        if not all(k in params and _fits(dists[k], params[k]) for k in dists):
            continue  # values outside the spec (cannot happen for our own trials): skipped
        study.add_trial(
            create_trial(
                state=trial.state.optuna,
                value=trial.value if trial.state is State.COMPLETE else None,
                params=params,
                distributions=dists,
                intermediate_values=trial.curve,
            )
        )
    return study


def trial_seed(seed: int, number: int) -> int:
    """Trial `number`'s sampler seed: mixed from both (a plain seed + number would give the
    sweep seeded 1 the draws of the sweep seeded 2, one trial later)."""
    digest = hashlib.sha256(f"{seed}:{number}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def next_params(
    *,
    method: str,
    goal: str,
    parameters: dict[str, Any],
    seed: int,
    max_runs: int,
    number: int,
    observed: list[Observed],
) -> dict[str, Any]:
    """The values of trial `number`: the grid's point, or the sampler's draw given the trials
    that have ended (seeded with seed + number: the same answer after any restart)."""
    if method == "grid":
        return grid_point(parameters, number)
    study = study_of(
        observed,
        goal=goal,
        parameters=parameters,
        sampler=sampler(method, seed=trial_seed(seed, number), max_runs=max_runs),
    )
    trial = study.ask(distributions(parameters))
    return {path: trial.params[path] for path in parameters}
