"""What every HTML page router shares: the logged-in user, friendly 403/404 pages, formatting.

A page router is `APIRouter(route_class=PageRoute)`. Its routes reuse the API's ownership
checks (app.ownership) and services, which raise domain errors (app.errors); PageRoute turns
a 403/404/422 (and a malformed id in the path) into an HTML page that says what to do,
instead of the API's JSON body (app.http_errors gives both the same status). An address no
route serves is an HTML 404 page too when a browser asks for one (``Accept: text/html``,
outside /api/ and /static/), and FastAPI's JSON ``{"detail": "Not Found"}`` for API clients
(``not_found``, installed by app/main.py).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute
from markupsafe import Markup
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.auth.deps import BrowserUser
from app.auth.models import User
from app.errors import DomainError
from app.http_errors import status_of
from app.templating import render, templates
from app.timeutil import as_utc, utcnow

_TITLES = {403: "Not yours", 404: "Not found", 422: "Not a valid address"}


async def page_user(request: Request, user: BrowserUser) -> User:
    """BrowserUser, remembered on the request so an error page can still show the header."""
    request.state.user = user
    return user


PageUser = Annotated[User, Depends(page_user)]


def error_page(request: Request, status_code: int, message: str) -> Response:
    return render(
        request,
        "error.html",
        user=getattr(request.state, "user", None),
        status_code=status_code,
        title=_TITLES.get(status_code, "Error"),
        message=message,
    )


NOT_PAGES = ("/api/", "/static/", "/metrics")  # JSON or files, whatever the client accepts


def wants_page(request: Request) -> bool:
    """A browser's navigation (it accepts HTML) to an address that may be a page."""
    path = request.url.path
    return not path.startswith(NOT_PAGES) and "text/html" in request.headers.get("accept", "")


async def not_found(request: Request, exc: Exception) -> Response:
    """Starlette's HTTP errors (an address no route serves, a method it does not take): the
    "Not found" page for a browser's 404, FastAPI's own JSON answer otherwise."""
    assert isinstance(exc, StarletteHTTPException)  # registered for it only
    if exc.status_code == 404 and wants_page(request):
        return error_page(request, 404, f"There is no page at {request.url.path}.")
    return await http_exception_handler(request, exc)


class PageRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def page_handler(request: Request) -> Response:
            try:
                return await handler(request)
            except DomainError as exc:
                code = status_of(exc)
                if code not in _TITLES:
                    raise
                return error_page(request, code, exc.detail)
            except HTTPException as exc:  # FastAPI's own (ours are DomainErrors)
                if exc.status_code not in _TITLES:
                    raise
                return error_page(request, exc.status_code, str(exc.detail))
            except RequestValidationError:
                return error_page(request, 404, f"There is no page at {request.url.path}.")

        return page_handler


# --- formatting for templates --------------------------------------------------------------


def when(value: datetime | None) -> Markup | str:
    """A point in time, as a <time> element in UTC that app/static/common.js rewrites into the
    reader's locale and time zone (the UTC time kept in its title): one format on every page,
    for the times rendered here and those the scripts add."""
    if value is None:
        return "–"
    utc = as_utc(value).astimezone(UTC)
    return Markup('<time datetime="{}" title="{} UTC">{} UTC</time>').format(
        utc.isoformat(timespec="seconds").replace("+00:00", "Z"),
        utc.strftime("%Y-%m-%d %H:%M:%S"),
        utc.strftime("%Y-%m-%d %H:%M"),
    )


def duration(start: datetime | None, end: datetime | None) -> str:
    if start is None:
        return "–"
    seconds = int(((as_utc(end) if end else utcnow()) - as_utc(start)).total_seconds())
    if seconds < 60:
        return f"{max(seconds, 0)}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60}m"


def metric(value: float | None) -> str:
    return "–" if value is None else f"{value:.4g}"


templates.env.filters.update(when=when, metric=metric)
templates.env.globals.update(duration=duration)
