"""The compare page: pick runs across experiments, overlay their curves, diff their configs."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy import select

from app.db import MAX_ID, SessionDep
from app.errors import Invalid
from app.experiments.models import Experiment
from app.metrics.models import MetricKey
from app.pages import PageRoute, PageUser
from app.runs.files.out import run_outs
from app.runs.models import Run, RunStatus
from app.runs.query import listing
from app.templating import render

router = APIRouter(include_in_schema=False, route_class=PageRoute)

MAX_RUNS = 1000  # issue 43: 1,000 runs overlaid on one chart
RECENT_RUNS = 50
MANY_RUNS = 100  # more runs than this: the picker's items and the config columns laid out lazily
_MISSING = object()


def parse_run_ids(raw: Sequence[str]) -> list[int]:
    """Parse "1,2, 3" (and repeated ?run=) to [1, 2, 3]: distinct, in order, junk ignored.
    A number of more than 19 digits (past any id: the callers refuse ids over MAX_ID) is kept
    as 10**19, not converted: Python refuses int() of over 4,300 digits, and a 1,000-run
    list's 12,000 characters may be one number."""
    ids: list[int] = []
    seen: set[int] = set()  # 1,000 ids: `in ids` was quadratic
    for part in re.split(r"[,\s]+", ",".join(raw)):
        if not part.isdigit():
            continue
        run_id = int(part) if len(part) <= 19 else 10**19
        if run_id not in seen:
            seen.add(run_id)
            ids.append(run_id)
    return ids


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"params": {"lr": 0.1}} -> {"params.lr": 0.1}; lists and scalars are leaves."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def config_diff(configs: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    """The dotted keys whose values are not all the same, with each config's value as text
    ("–" where a config has no such key), sorted by key."""
    flats = [flatten(c) for c in configs]
    keys = sorted(set().union(*flats)) if flats else []
    rows = []
    for key in keys:
        values = [f.get(key, _MISSING) for f in flats]
        if len(configs) > 1 and any(v != values[0] for v in values[1:]):
            shown = ["–" if v is _MISSING else json.dumps(v) for v in values]
            rows.append((key, shown))
    return rows


@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request,
    session: SessionDep,
    user: PageUser,
    runs: str = "",
    run: Annotated[list[str] | None, Query()] = None,
    experiment_id: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    tag: str = "",
    status: Annotated[list[RunStatus] | None, Query()] = None,
    filters: Annotated[list[str] | None, Query(alias="filter")] = None,
) -> HTMLResponse:
    wanted = parse_run_ids([runs, *(run or [])])
    if any(i > MAX_ID for i in wanted):
        # No run has such an id, and the database cannot even compare with it (a 500).
        raise Invalid.at(["query", "runs"], f"Run ids go up to {MAX_ID}: check the runs= list.")
    # The form's textarea sends one condition a line.
    conditions = [c.strip() for f in filters or [] for c in f.splitlines() if c.strip()]
    if "\x00" in tag or any("\x00" in c or len(c) > 600 for c in conditions):
        raise Invalid.at(["query", "filter"], "A filter is at most 600 characters, without NUL.")
    by_filter = experiment_id is not None or bool(tag.strip() or status or conditions)
    if by_filter:
        # The runs list's own filter (GET /api/runs, app/runs/query/listing.py): its 422 names a
        # condition it cannot read. Newest first, one more than shown to tell "too many".
        query = listing.RunQuery(
            limit=MAX_RUNS + 1,
            experiment_id=experiment_id,
            statuses=status or (),
            tags=[tag.strip()] if tag.strip() else (),
            filters=conditions,
        )
        wanted += [r.id for r in listing.list_runs(session, query).runs if r.id not in wanted]
    too_many = len(wanted) > MAX_RUNS
    wanted = wanted[:MAX_RUNS]

    base = select(Run, Experiment.name).join(Experiment, Experiment.id == Run.experiment_id)
    found = {r.id: (r, name) for r, name in session.execute(base.where(Run.id.in_(wanted)))}
    chosen = [found[i] for i in wanted if i in found]
    missing = [i for i in wanted if i not in found]
    recent = list(session.execute(base.order_by(Run.id.desc()).limit(RECENT_RUNS)))
    picker = chosen + [(r, name) for r, name in recent if r.id not in found]

    # train/* and val/* first, then the rest (epoch, custom keys)
    keys = sorted(
        set(
            session.scalars(
                select(MetricKey.key).where(MetricKey.run_id.in_([r.id for r, _ in chosen]))
            )
        ),
        key=lambda k: (not k.startswith(("train/", "val/")), k),
    )
    outs = run_outs(session, [r for r, _ in chosen])
    return render(
        request,
        "compare.html",
        runs_data=[
            {"id": o.id, "name": o.name, "status": o.status, "params": o.params} for o in outs
        ],
        form={
            "experiment_id": experiment_id or "",
            "tag": tag,
            "status": [s.value for s in status or []],
            "filter": "\n".join(conditions),
            "by_filter": by_filter,
        },
        statuses=[s.value for s in RunStatus],
        user=user,
        chosen=chosen,
        chosen_ids=[r.id for r, _ in chosen],
        picker=picker,
        missing=missing,
        too_many=too_many,
        max_runs=MAX_RUNS,
        many_runs=MANY_RUNS,
        metric_keys=keys,
        diff=config_diff([r.config for r, _ in chosen]),
    )
