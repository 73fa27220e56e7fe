"""The one place a domain error (app/errors.py) becomes HTTP: its status, headers and JSON
body `{"detail": ...}` (a sentence, or for 422 FastAPI's list of field errors), and the
OpenAPI description of those bodies. `install_error_handlers` registers the handler on the
app; the HTML pages ask `status_of` to render the same error as a page (app/pages.py).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from sqlalchemy.exc import DBAPIError

from app.db import database_away
from app.errors import (
    BadRequest,
    Conflict,
    DomainError,
    Forbidden,
    Invalid,
    NotFound,
    TooLarge,
    TooMany,
    Unauthorized,
    UnsupportedMedia,
)

_STATUS: dict[type[DomainError], int] = {
    BadRequest: status.HTTP_400_BAD_REQUEST,
    Unauthorized: status.HTTP_401_UNAUTHORIZED,
    Forbidden: status.HTTP_403_FORBIDDEN,
    NotFound: status.HTTP_404_NOT_FOUND,
    Conflict: status.HTTP_409_CONFLICT,
    TooLarge: status.HTTP_413_CONTENT_TOO_LARGE,
    UnsupportedMedia: status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
    Invalid: status.HTTP_422_UNPROCESSABLE_CONTENT,
    TooMany: status.HTTP_429_TOO_MANY_REQUESTS,
}


def status_of(exc: DomainError) -> int:
    """The status of the nearest mapped class (a subclass such as ConfigInvalid is its
    parent's); an unmapped DomainError is a bug of ours, a 500, never a guess at a 4xx."""
    for cls in type(exc).__mro__:
        code = _STATUS.get(cls)
        if code is not None:
            return code
    return status.HTTP_500_INTERNAL_SERVER_ERROR


def _headers(exc: DomainError) -> dict[str, str] | None:
    if isinstance(exc, Unauthorized):
        return {"WWW-Authenticate": "Bearer"}
    if isinstance(exc, TooMany):
        return {"Retry-After": str(exc.retry_after)}
    return None


def error_response(exc: DomainError) -> JSONResponse:
    detail: Any = exc.errors if isinstance(exc, Invalid) else exc.detail
    return JSONResponse(
        {"detail": jsonable_encoder(detail)}, status_code=status_of(exc), headers=_headers(exc)
    )


async def _handle(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DomainError)  # registered for DomainError only
    return error_response(exc)


# How long a client waits before it tries again when the database was away for a moment.
DATABASE_RETRY_AFTER = 1

log = logging.getLogger(__name__)


async def _database_error(request: Request, exc: Exception) -> Response:
    """A lost database connection (or SQLite's lock) is the database away for a moment, not a
    bug: 503 with Retry-After, which clients retry (issue 27: pg_terminate_backend answered
    500s). Any other database error is still a 500."""
    if not database_away(exc):
        raise exc
    log.warning("database unavailable for %s %s: %s", request.method, request.url.path, exc)
    return JSONResponse(
        {"detail": "the database is unavailable for a moment: try again"},
        status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": str(DATABASE_RETRY_AFTER)},
    )


def install_error_handlers(app: FastAPI) -> None:
    """Every route's (and dependency's) DomainError answers as `error_response` says; a
    database that is away for a moment answers 503 (`_database_error`)."""
    app.add_exception_handler(DomainError, _handle)
    app.add_exception_handler(DBAPIError, _database_error)


class ErrorOut(BaseModel):
    """The body of every 4xx but 422 (whose `detail` is FastAPI's list of field errors)."""

    detail: str = Field(examples=["run 12 not found"])


_ERROR_DESCRIPTIONS = {
    400: "The body cannot be parsed (e.g. not UTF-8)",
    401: "Missing, invalid, expired or revoked credentials",
    403: "Not yours (another user's), or a cookie-authenticated change without the CSRF token",
    404: "No such resource",
    409: "The resource's state does not allow this",
    429: "Too many attempts (or open streams): wait as long as Retry-After says",
}
_ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}


def error_responses(*codes: int, non_json_route: bool = False) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` for routers and routes: each code with the `{"detail": "..."}`
    body, so clients (and schemathesis) know every status a route answers with.

    FastAPI files a response `model` under the route's own media type, which is wrong for the
    routes that answer with text, files or an event stream: those pass `non_json_route` and
    get the JSON content alone (the JSON routes' `model` puts ErrorOut in the components)."""
    responses: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        response = {"description": _ERROR_DESCRIPTIONS[code], "content": _ERROR_CONTENT}
        responses[code] = response if non_json_route else {**response, "model": ErrorOut}
    return responses
