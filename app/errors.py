"""Error responses: every problem is a 4xx JSON body `{"detail": ...}` that says what is wrong."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException, status


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
