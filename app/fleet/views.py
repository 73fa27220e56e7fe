"""The Fleet page (/fleet): the API's per-user table, with a window picker."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.db import SessionDep
from app.errors import Invalid
from app.fleet.api import fleet_report
from app.fleet.schemas import WINDOWS, Window
from app.pages import PageRoute, PageUser
from app.templating import render

router = APIRouter(include_in_schema=False, route_class=PageRoute)


@router.get("/fleet", response_class=HTMLResponse)
def fleet_page(
    request: Request, session: SessionDep, user: PageUser, window: str = "7d"
) -> HTMLResponse:
    if window not in WINDOWS:
        raise Invalid.at(["query", "window"], f"one of {', '.join(WINDOWS)}", window)
    chosen: Window = "24h" if window == "24h" else "30d" if window == "30d" else "7d"
    report = fleet_report(session, user, chosen)
    return render(request, "fleet.html", user=user, report=report, windows=list(WINDOWS))
