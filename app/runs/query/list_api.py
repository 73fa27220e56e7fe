"""GET /api/runs (filtered, sorted, paged: app/runs/query/listing.py) and PATCH /api/runs/{id}
(name, tags, notes). Reading is any signed-in user's; the PATCH goes through the one ownership
check (app/ownership.py: the owner or an admin)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.auth.deps import CurrentUser
from app.db import MAX_ID, SessionDep
from app.errors import Invalid
from app.http_errors import error_responses
from app.ownership import OwnedRun
from app.runs import service
from app.runs.files.out import LIST_SUMMARIES, run_outs
from app.runs.models import RunStatus
from app.runs.query import listing
from app.runs.schemas import RunListOut, RunOut, RunPatch
from app.users.filters import OwnerQuery
from app.users.service import resolve_owner

router = APIRouter(prefix="/api", tags=["runs"])
NO_NUL = r"^[^\x00]*$"
MAX_SUMMARY_KEYS = 100


@router.get("/runs", response_model=RunListOut)
def list_runs(
    session: SessionDep,
    user: CurrentUser,
    owner: OwnerQuery = None,
    experiment_id: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    status: Annotated[list[RunStatus] | None, Query(description="repeat for several")] = None,
    tag: Annotated[
        list[str] | None, Query(description="runs with this tag (repeat: with all of them)")
    ] = None,
    sweep_id: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    filters: Annotated[
        list[str] | None,
        Query(
            alias="filter",
            description="the filter language, repeatable (all must hold): "
            f"{listing.FILTER_SYNTAX}; e.g. `val/acc>0.9 and (lr<=0.01 or tags~best)`, "
            "`name in (a, b)`, `val/acc.max>=0.9`",
        ),
    ] = None,
    q: Annotated[
        str,
        Query(
            max_length=200,
            pattern=NO_NUL,
            description="free text: each word found in the run's name, a tag or a param's "
            "value (text, or the number), or the run's id (the compare page's run picker)",
        ),
    ] = "",
    summary_keys: Annotated[
        list[str] | None,
        Query(
            description="metric keys whose summaries each run carries besides its first "
            f"{LIST_SUMMARIES} (train/ and val/ first, then by name); repeat for several",
        ),
    ] = None,
    summary_first: Annotated[
        int,
        Query(
            ge=0,
            le=LIST_SUMMARIES,
            description="how many of each run's first keys (train/ and val/ first, then by "
            f"name) carry their summary besides `summary_keys`: at most {LIST_SUMMARIES} (the "
            "default); 0 gives the summaries of the `summary_keys` alone (the experiment page "
            "asks for its shown columns' only)",
        ),
    ] = LIST_SUMMARIES,
    sort: Annotated[str, Query(max_length=600, pattern=NO_NUL, description=listing.SYNTAX)] = "-id",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cursor: Annotated[
        str | None, Query(max_length=4096, description="`next` of the previous page")
    ] = None,
) -> RunListOut:
    """Runs on the box (everyone reads them all), filtered, sorted, a page at a time: see
    app/runs/query/listing.py for the sort and filter syntax. Each run carries at most 50 metric
    summaries (`summary_first`, fewer when asked) plus those `summary_keys` names, `summary_cut`
    when it has more (GET /api/runs/{id}: all). `owner=me` (or a username) for one owner's.
    `next` is null on the last page."""
    if len(summary_keys or ()) > MAX_SUMMARY_KEYS:
        raise Invalid.at(["query", "summary_keys"], f"at most {MAX_SUMMARY_KEYS} keys", None)
    for loc, values in (("tag", tag), ("filter", filters), ("summary_keys", summary_keys)):
        for value in values or []:
            if len(value) > 600 or "\x00" in value:
                raise Invalid.at(["query", loc], "at most 600 characters, no NUL", value[:100])
    query = listing.RunQuery(
        sort=sort,
        limit=limit,
        cursor=cursor or None,  # an empty cursor: the first page
        experiment_id=experiment_id,
        owner_id=resolve_owner(session, user=user, owner=owner, loc="owner"),
        statuses=status or (),
        tags=tag or (),
        sweep_id=sweep_id,
        filters=filters or (),
        search=q,
    )
    page = listing.list_runs(session, query)
    outs = run_outs(
        session, page.runs, listed=True, summary_keys=summary_keys or (), first=summary_first
    )
    return RunListOut(runs=outs, next=page.next)


@router.patch(
    "/runs/{run_id}",
    response_model=RunOut,
    responses=error_responses(400, 403, 404),  # 400: a body that is not even JSON text
)
def edit_run(run: OwnedRun, data: RunPatch, session: SessionDep) -> RunOut:
    """Name, tags and notes (the owner's or an admin's); absent fields stay as they are."""
    return run_outs(session, [service.edit_run(session, run=run, patch=data)])[0]
