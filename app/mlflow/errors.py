"""MLflow's error shape on MLflow's routes only: ``{"error_code": ..., "message": ...}`` with
the HTTP status MLflow gives each code, which its client turns into an ``MlflowException``
(and retries on 429 and 5xx only).

FastAPI has no exception handlers per router, so the router's route class catches: our own
``MlflowError``, FastAPI's validation errors, the domain errors of shared services (app/errors.py:
a deletion's 409) and HTTP errors (the body limit's 413) are answered in MLflow's shape here, while
every other route of the app keeps torchyard's ``{"detail": ...}``.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from app.errors import DomainError, TooMany
from app.http_errors import status_of
from app.strict_json import PARSED

INVALID_PARAMETER_VALUE = "INVALID_PARAMETER_VALUE"
RESOURCE_DOES_NOT_EXIST = "RESOURCE_DOES_NOT_EXIST"
RESOURCE_ALREADY_EXISTS = "RESOURCE_ALREADY_EXISTS"
PERMISSION_DENIED = "PERMISSION_DENIED"
UNAUTHENTICATED = "UNAUTHENTICATED"
INVALID_STATE = "INVALID_STATE"
BAD_REQUEST = "BAD_REQUEST"
REQUEST_LIMIT_EXCEEDED = "REQUEST_LIMIT_EXCEEDED"
ENDPOINT_NOT_FOUND = "ENDPOINT_NOT_FOUND"
TEMPORARILY_UNAVAILABLE = "TEMPORARILY_UNAVAILABLE"

# mlflow.exceptions.ERROR_CODE_TO_HTTP_STATUS for the codes we answer with, but for
# INVALID_STATE: MLflow's 500 makes its client retry (and then report a connection error
# instead of the message), so a state that does not allow the call is a 409.
STATUS = {
    INVALID_PARAMETER_VALUE: 400,
    RESOURCE_DOES_NOT_EXIST: 404,
    RESOURCE_ALREADY_EXISTS: 400,
    PERMISSION_DENIED: 403,
    UNAUTHENTICATED: 401,
    INVALID_STATE: 409,
    BAD_REQUEST: 400,
    REQUEST_LIMIT_EXCEEDED: 429,
    ENDPOINT_NOT_FOUND: 404,
    TEMPORARILY_UNAVAILABLE: 503,
}
_BY_HTTP_STATUS = {
    401: UNAUTHENTICATED,
    403: PERMISSION_DENIED,
    404: RESOURCE_DOES_NOT_EXIST,
    409: INVALID_STATE,
    413: INVALID_PARAMETER_VALUE,
    422: INVALID_PARAMETER_VALUE,
    429: REQUEST_LIMIT_EXCEEDED,
    503: TEMPORARILY_UNAVAILABLE,
}


class MlflowError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> MlflowError:
    return MlflowError(INVALID_PARAMETER_VALUE, message)


def missing(what: str) -> MlflowError:
    return MlflowError(RESOURCE_DOES_NOT_EXIST, f"{what} not found")


def denied(message: str) -> MlflowError:
    return MlflowError(PERMISSION_DENIED, message)


def error_response(
    code: str, message: str, status: int | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error_code": code, "message": message},
        status_code=status or STATUS.get(code, 400),
        headers=headers,
    )


def parameter_name(loc: Sequence[Any]) -> str:
    """A pydantic location as MLflow names a parameter: ``metrics[0].timestamp``."""
    name = ""
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else f"{'.' if name else ''}{part}"
    return name


def parameter_message(error: Mapping[str, Any]) -> str:
    """MLflow's words for a bad parameter (its tests match them): "Missing value for required
    parameter 'key'" (absent or null) or "Invalid value 31 for parameter 'run_id' supplied"."""
    loc = tuple(error.get("loc", ()))
    name = parameter_name(loc[1:] if loc[:1] == ("body",) else loc) or "body"
    given = error.get("input")
    if error.get("type") == "missing" or given is None:
        return f"Missing value for required parameter '{name}'."
    shown = orjson.dumps(given, default=str).decode()
    shown = shown if len(shown) <= 200 else shown[:200] + "..."
    return f"Invalid value {shown} for parameter '{name}' supplied: {error.get('msg', 'invalid')}"


def _validation_message(exc: RequestValidationError) -> str:
    return "; ".join(parameter_message(e) for e in exc.errors()[:3]) or "invalid request"


def _detail_text(detail: Any) -> str:
    return detail if isinstance(detail, str) else str(detail)


class _CheckedBodyRequest(Request):
    """A request whose JSON body is the value app.strict_json parsed while checking it, when it
    did: FastAPI's own parse of a log-batch body was a second parse of every request."""

    async def json(self) -> Any:
        if not hasattr(self, "_json") and PARSED in self.scope:
            self._json = self.scope[PARSED]
        return await super().json()


class MlflowRoute(APIRoute):
    """A route whose errors come out in MLflow's shape (see the module's docstring), and whose
    body is parsed once (_CheckedBodyRequest)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def in_mlflow_shape(request: Request) -> Response:
            request = _CheckedBodyRequest(request.scope, request.receive, request._send)
            try:
                return await handler(request)
            except MlflowError as exc:
                return error_response(exc.code, exc.message)
            except RequestValidationError as exc:
                return error_response(INVALID_PARAMETER_VALUE, _validation_message(exc))
            except DomainError as exc:  # a shared service's refusal (a 409 of a deletion)
                status = status_of(exc)
                headers = (
                    {"Retry-After": str(exc.retry_after)} if isinstance(exc, TooMany) else None
                )
                return error_response(
                    _BY_HTTP_STATUS.get(status, BAD_REQUEST), exc.detail, status, headers
                )
            except HTTPException as exc:
                code = _BY_HTTP_STATUS.get(exc.status_code, BAD_REQUEST)
                return error_response(
                    code, _detail_text(exc.detail), exc.status_code, dict(exc.headers or {})
                )

        return in_mlflow_shape
