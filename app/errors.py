"""Error responses: every problem is a 4xx JSON body `{"detail": ...}` that says what is wrong."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException, status
from pydantic import BaseModel, Field


def not_found(what: str, ident: object) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, detail=f"{what} {ident} not found")


def forbidden(message: str) -> HTTPException:
    return HTTPException(status.HTTP_403_FORBIDDEN, detail=message)


def conflict(message: str) -> HTTPException:
    return HTTPException(status.HTTP_409_CONFLICT, detail=message)


def unauthorized(message: str) -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, detail=message, headers={"WWW-Authenticate": "Bearer"}
    )


def validation_error(errors: list[dict[str, Any]]) -> HTTPException:
    """The same shape as FastAPI's own 422, so clients parse one format."""
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=errors)


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
