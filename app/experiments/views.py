"""HTML pages of experiments: the list (home page), the new-experiment form, one experiment."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.auth.models import User
from app.db import MAX_ID, SessionDep
from app.errors import Invalid
from app.experiments import service
from app.experiments.best import best_of_experiments, experiment_metrics
from app.experiments.config.model import RunConfig, ScriptConfig, run_config
from app.experiments.held_keys import held_keys, key_order
from app.experiments.models import Experiment
from app.gpus.pools import live_pools, pool_executors
from app.metrics.summary import listed_keys, run_summaries
from app.ownership import find_experiment, find_run
from app.pages import PageRoute, PageUser
from app.runs.files.out import LIST_SUMMARIES, run_outs
from app.runs.models import Run, RunStatus
from app.runs.query import listing
from app.runs.service import why_queued_many
from app.settings import get_settings
from app.settings_pools import LOCAL_POOL
from app.sweeps.out import sweep_briefs
from app.sweeps.service import sweeps_of
from app.templating import render
from app.timeutil import utcnow
from app.users.filters import page_owner
from torchyard.recipes.catalog import METRIC_KEYS, RECIPES, Param

router = APIRouter(include_in_schema=False, route_class=PageRoute)

PER_PAGE = 20
MAX_PAGE = MAX_ID // PER_PAGE


def _page_number(raw: str | None) -> int:
    """The page asked for (1 for junk); a number past any real page is a 422 page, not an
    offset the database cannot hold (a 500)."""
    try:
        number = max(1, int(raw or 1))
    except ValueError:
        return 1
    if number > MAX_PAGE:
        shown = raw[:40] if raw else ""
        raise Invalid.at(["query", "page"], f"There is no page {shown}: pages go up to {MAX_PAGE}.")
    return number


def _usernames(session: SessionDep, user_ids: set[int]) -> dict[int, str]:
    if not user_ids:
        return {}
    rows = session.execute(select(User.id, User.username).where(User.id.in_(user_ids)))
    return {uid: name for uid, name in rows}


@router.get("/", response_class=HTMLResponse)
def experiments_page(
    request: Request,
    session: SessionDep,
    user: PageUser,
    q: str = "",
    page: str | None = None,
    owner: str = "",
) -> HTMLResponse:
    q = q.strip()
    number = _page_number(page)
    owner_id, owner_name = page_owner(session, user=user, owner=owner)
    found, has_next = service.search_experiments(
        session, owner_id=owner_id, query=q, offset=(number - 1) * PER_PAGE, limit=PER_PAGE
    )
    rows = service.to_out(session, found)
    runs = service.run_ids_by_experiment(session, experiment_ids=[e.id for e in found])
    bests = best_of_experiments(
        session,
        experiments=found,
        run_ids={exp_id: [rid for rid, _ in rs] for exp_id, rs in runs.items()},
    )
    items = []
    for row in rows:
        exp_runs = runs.get(row.id, [])
        items.append(
            {
                "exp": row,
                "last_status": exp_runs[0][1] if exp_runs else None,
                "best": bests.get(row.id),
            }
        )
    return render(
        request,
        "experiments.html",
        user=user,
        items=items,
        q=q,
        page=number,
        has_next=has_next,
        owner=owner_name,
    )


# --- the new-experiment form ---------------------------------------------------------------


@dataclass(frozen=True)
class ParamField:
    name: str
    kind: str  # int, float, bool, choice, str
    value: Any
    default: Any
    help: str
    min: float | None  # for the input's min attribute (a hint: the server checks)
    max: float | None
    bounds: str  # for people: "> 0, ≤ 10"
    choices: tuple[str, ...]


def _param_field(param: Param, value: Any) -> ParamField:
    if param.choices:
        kind = "choice"
    else:
        kind = {int: "int", float: "float", bool: "bool"}.get(param.kind, "str")
    bounds = []
    if param.ge is not None:
        bounds.append(f"≥ {param.ge:g}")
    if param.gt is not None:
        bounds.append(f"> {param.gt:g}")
    if param.le is not None:
        bounds.append(f"≤ {param.le:g}")
    return ParamField(
        name=param.name,
        kind=kind,
        value=value,
        default=param.default,
        help=param.help,
        min=param.ge if param.ge is not None else param.gt,
        max=param.le,
        bounds=", ".join(bounds),
        choices=param.choices or (),
    )


def _form_values(source: Experiment | None, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the form starts with: the catalog's defaults, or a copy of `source`'s config (or of
    `config`, a run's resolved config, for a variant of that run)."""
    first = next(iter(RECIPES))
    if source is None:
        return {
            "name": first,  # follows the recipe picker until the user edits it
            "description": "",
            "recipe": first,
            "params": {},
            **RunConfig().model_dump(
                mode="json", include={"seed", "deterministic", "resources", "max_restarts"}
            ),
            **_script_values({}),
        }
    config = config if config is not None else source.config
    typed = run_config(config)
    recipe: str = first
    if isinstance(typed, ScriptConfig):
        recipe = SCRIPT_CHOICE
    elif type(typed) is not RunConfig:  # a recipe this server still has
        recipe = str(config["recipe"])
    return {
        "name": f"{source.name} (copy)"[:200],
        "description": source.description,
        "recipe": recipe,
        "params": config.get("params") or {},
        **typed.model_dump(
            mode="json", include={"seed", "deterministic", "resources", "max_restarts"}
        ),
        **_script_values(config),
    }


# The recipe picker's entry for "a script from the workspace".
SCRIPT_CHOICE = "__script__"


def _script_values(config: dict[str, Any]) -> dict[str, Any]:
    """A script config as the form shows it (with its code snapshot's digest, if any): args
    space-separated (quoted when needed), params one ``key=value`` per line."""
    if not config.get("script"):
        return {"script": "", "script_args": "", "script_params": "", "code": ""}
    params = config.get("params") or {}
    return {
        "script": config["script"],
        "code": config.get("code") or "",  # a clone runs the same uploaded snapshot
        "script_args": shlex.join(config.get("args") or []),
        "script_params": "\n".join(
            f"{k}={json.dumps(v) if isinstance(v, bool) else v}" for k, v in params.items()
        ),
    }


@router.get("/experiments/new", response_class=HTMLResponse)
def new_experiment_page(
    request: Request,
    session: SessionDep,
    user: PageUser,
    from_: Annotated[str | None, Query(alias="from")] = None,
    variant_of: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
) -> HTMLResponse:
    """The new-experiment form; `?from=E` clones experiment E into a new one, `?variant_of=R`
    prefills it with run R's resolved config and launches a new run of R's experiment (the
    form's config sent as that run's overrides) instead of making an experiment."""
    source = None
    variant = None
    if variant_of is not None:
        variant = find_run(variant_of, session, user, write=False)
        source = find_experiment(variant.experiment_id, session, user, write=True)
    elif from_:
        try:
            source_id = int(from_)
        except ValueError:
            source_id = 0
        source = find_experiment(source_id, session, user, write=False)
    values = _form_values(source, variant.config if variant is not None else None)
    recipes = [
        {
            "name": recipe.name,
            "description": recipe.description,
            "fields": [
                _param_field(
                    p,
                    values["params"].get(p.name, p.default)
                    if recipe.name == values["recipe"]
                    else p.default,
                )
                for p in recipe.params
            ],
        }
        for recipe in RECIPES.values()
    ]
    return render(
        request,
        "experiment_new.html",
        user=user,
        recipes=recipes,
        values=values,
        source=source,
        variant=variant,
        script_choice=SCRIPT_CHOICE,
        workspace=str(get_settings().workspace_dir),
        pools=_pool_choices(session, values["resources"]["pool"]),
    )


def _pool_choices(session: Session, current: str) -> list[dict[str, Any]]:
    """The form's pool select: the local pool (the default), every pool with a live worker,
    and the copied config's own pool even without one (said so)."""
    settings = get_settings()
    now, ttl = utcnow(), settings.lease_ttl_seconds
    live = live_pools(session, now=now, ttl_seconds=ttl)
    executors = pool_executors(session, now=now, ttl_seconds=ttl)
    names = sorted({LOCAL_POOL, current, *live}, key=lambda name: (name != LOCAL_POOL, name))
    return [
        {"name": n, "live": n in live, "hosts": len(live.get(n, ())), "executor": executors.get(n)}
        for n in names
    ]


# --- one experiment ------------------------------------------------------------------------


def get_page_experiment(experiment_id: int, session: SessionDep, user: PageUser) -> Experiment:
    """The API's rule (404 when missing) for a page: PageRoute renders the error."""
    return find_experiment(experiment_id, session, user, write=False)


PageExperiment = Annotated[Experiment, Depends(get_page_experiment)]


@router.get("/experiments/{experiment_id}", response_class=HTMLResponse)
def experiment_page(
    request: Request, experiment: PageExperiment, session: SessionDep, user: PageUser
) -> HTMLResponse:
    """The page holds the newest runs (the curves' CURVE_RUNS, the table's first TABLE_ROWS of
    them as rows for before the script), never every run: with 10,000 runs it was 4.5 MB of
    HTML the table's script rebuilt from GET /api/runs anyway (issue 31). Counts are counts."""
    out = service.to_out(session, [experiment])[0]
    first = listing.list_runs(session, _newest(experiment.id, TABLE_ROWS))
    rows = first.runs
    # the curves' runs go on from the table's page (by its cursor: the same runs, however
    # many are launched meanwhile)
    rest = _newest(experiment.id, CURVE_RUNS - TABLE_ROWS, first.next)
    newest = rows + (listing.list_runs(session, rest).runs if first.next else [])
    shown = rows[:SHOWN_ROWS]  # as HTML rows; the script shows the rest of the page at once
    summaries = run_summaries(session, run_ids=[r.id for r in shown])
    names = _usernames(session, _owner_ids(session, experiment))
    reasons = why_queued_many(session, runs=shown)  # the scheduler's words for queued runs
    # The summaries of the keys the table and the parallel coordinates show first only
    # (app/experiments/held_keys.py): every key's were 90% of the page. And the names of the
    # first PAGE_KEYS keys alone: the pickers search the others (issue 43).
    listed = listed_keys(session, run_ids=[r.id for r in newest], first=LIST_SUMMARIES)
    held = held_keys(listed)
    keys = sorted(listed, key=key_order)[:PAGE_KEYS]
    outs = run_outs(session, newest, listed=True, only_keys=held)
    # Fields that are null left out (the scripts read a missing field as they read null): ~400
    # of a finished run's ~840 bytes, 40 KB of the page at 100 runs (issue 43).
    curve_runs = [o.model_dump(mode="json", exclude_none=True) for o in outs]
    return render(
        request,
        "experiment.html",
        user=user,
        experiment=experiment,
        owner=out.owner,
        config_json=json.dumps(experiment.config, indent=2, sort_keys=True),
        disk_bytes=out.disk_bytes,
        run_count=out.run_count,
        runs=[
            {
                "run": r,
                "summary": summaries[r.id],
                "launched_by": names.get(r.owner_id, "?"),
                "queue_reason": reasons.get(r.id),
            }
            for r in shown
        ],
        # For the runs table's script (app/static/experiment_runs.js): who launched each run
        # (the API gives owner ids) and the statuses its filter offers.
        owners={str(uid): name for uid, name in names.items()},
        statuses=[s.value for s in RunStatus],
        # The experiment's sweeps, newest first, as GET /api/sweeps?experiment_id= gives them.
        sweeps=sweep_briefs(session, sweeps_of(session, experiment_id=experiment.id)),
        sweep_metric_keys=METRIC_KEYS if "recipe" in experiment.config else (),
        # The overlaid curves' runs (app/static/experiment_curves.js), as GET /api/runs gives
        # them: in the page, so the curves' series are asked for at once, not after a list
        # request (a round trip that was a third of the page's time with 100 runs).
        curve_runs=curve_runs,
        # The "best" metric the experiments list uses for it (app/experiments/best.py); the
        # keys offered when choosing one are searched (app/static/experiment_best.js).
        best=experiment_metrics(session, experiments=[experiment]).get(experiment.id),
        # The first keys of the curves' runs ("all": their charts, the columns offered;
        # "more": they log others, which the pickers search: GET /api/experiments/{id}/keys)
        # and those whose summaries the runs carry ("held"; the table asks the API for any
        # other).
        metric_keys={"all": keys, "held": held, "more": len(listed) > len(keys)},
        # The table's first page is the first of those (app/static/lib/first_page.js): how
        # many, and its cursor, so the table shows them without asking GET /api/runs again.
        first_page={"take": len(rows), "next": first.next},
    )


# The rows of the HTML table, before the script shows the table's whole first page from the
# runs the page holds (a screen and more: each row is ~380 bytes, 100 of them were 38 KB of a
# page kept under 100 KB for 100 runs logging 1,000 keys each: issue 43).
SHOWN_ROWS = 40
# The table's first page, held for before the table's script lists them (its page: PAGE in
# app/static/experiment_runs.js).
TABLE_ROWS = 100


def _owner_ids(session: SessionDep, experiment: Experiment) -> set[int]:
    """Whoever launched any run of the experiment (a few people, however many runs), and its
    owner: the table names the launcher of every run it lists, on any page."""
    stmt = select(Run.owner_id).where(Run.experiment_id == experiment.id).distinct()
    return set(session.scalars(stmt)) | {experiment.owner_id}


CURVE_RUNS = 200  # the newest runs whose curves the experiment page overlays
# The key names the page holds (in the pages' key order): its first charts and columns. With
# every listed key's name (200 runs x 50) the page was 453 KB for 100,000 keys (issue 43); the
# overlay charts 48 keys at most (app/static/overlay.js MAX_CHARTS), leaving room for searched.
PAGE_KEYS = 40


def _newest(experiment_id: int, limit: int, cursor: str | None = None) -> listing.RunQuery:
    """The newest runs, as the table's default query lists them (sort=-id)."""
    return listing.RunQuery(sort="-id", limit=limit, experiment_id=experiment_id, cursor=cursor)
