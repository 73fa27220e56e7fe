"""The REST client the CLI commands share: one httpx.Client, and every failure turned into a
one-line `CliError` (an unreachable server, a refused token, the server's 404/409/422 detail),
so a command never ends in a traceback. The CLI talks to the server only through this, which
is why it works the same from a laptop against the team box as on the box itself; and only to
the endpoints of torchyard/cli/endpoints.py, whose query and body kinds each call is held to.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from http import HTTPStatus
from typing import Any

import httpx

from torchyard.cli.config import Target
from torchyard.cli.endpoints import Call
from torchyard.field_location import location_text

TIMEOUT = httpx.Timeout(60.0, connect=10.0)
REASONS = {403: "forbidden", 404: "not found", 409: "conflict", 422: "invalid request"}


class CliError(Exception):
    """A failure to report as `error: <message>` on stderr, then exit with `exit_code`."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class Unreachable(CliError):
    """No HTTP answer at all (refused, timed out, dropped): worth retrying while following."""


class ApiError(CliError):
    """The server answered with a 4xx/5xx; `status` lets a caller treat some codes specially."""

    def __init__(self, message: str, status: int, detail: str) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


def describe_detail(response: httpx.Response) -> str:
    """The server's `detail` as one line; a 422 list becomes `loc: msg; loc: msg`."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip().replace("\n", " ")[:300] or response.reason_phrase
    if isinstance(body, dict) and "error_code" in body:  # MLflow's shape (/api/2.0/mlflow)
        return f"{body['error_code']}: {body.get('message', '')}"
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                where = location_text(item.get("loc", []))
                msg = str(item.get("msg", item))
                parts.append(f"{where}: {msg}" if where else msg)
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return str(detail)


def http_error(response: httpx.Response, *, server: str, had_token: bool) -> ApiError:
    status = response.status_code
    detail = describe_detail(response)
    if status == 401 and had_token:
        message = f"the server refused the token (401): {detail}; run torchyard login"
    elif status == 401:
        message = f"not logged in to {server} (401): {detail}; run torchyard login"
    else:
        try:
            reason = REASONS.get(status) or HTTPStatus(status).phrase.lower()
        except ValueError:
            reason = "error"
        message = f"{reason} ({status}): {detail}"
    return ApiError(message, status, detail)


def transport_error(error: httpx.TransportError, *, server: str) -> Unreachable:
    text = str(error) or type(error).__name__
    if isinstance(error, httpx.ConnectError):
        lowered = text.lower()
        if "refused" in lowered:
            reason = "connection refused"
        elif "name or service" in lowered or "nodename" in lowered or "resolution" in lowered:
            reason = "unknown host"
        else:
            reason = text
        return Unreachable(f"cannot reach the torchyard server at {server} ({reason})")
    if isinstance(error, httpx.TimeoutException):
        return Unreachable(f"the torchyard server at {server} did not answer in time ({text})")
    return Unreachable(f"lost the connection to the torchyard server at {server}: {text}")


class Api:
    """A thin layer over httpx: base URL, bearer token, errors as CliError."""

    def __init__(self, target: Target, *, transport: httpx.BaseTransport | None = None) -> None:
        self.server = target.server
        self.token = target.token
        headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}
        self.http = httpx.Client(
            base_url=target.server, headers=headers, timeout=TIMEOUT, transport=transport
        )

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.http.close()

    def page_url(self, page: Call) -> str:
        """The address of a web page (endpoints.PAGES) on this server, to print."""
        return f"{self.server}{page.path}"

    def _check(self, response: httpx.Response) -> httpx.Response:
        if response.status_code >= 400:
            raise http_error(response, server=self.server, had_token=bool(self.token))
        return response

    def request(self, call: Call, **kwargs: Any) -> httpx.Response:
        """The response to ``call`` (2xx, else an ApiError); ``kwargs``: httpx's (params,
        json, data, files, headers), held to what the endpoint declares."""
        _hold_to_endpoint(call, kwargs)
        try:
            response = self.http.request(call.method, call.path, **kwargs)
        except httpx.TransportError as e:
            raise transport_error(e, server=self.server) from e
        return self._check(response)

    def json(self, call: Call, **kwargs: Any) -> Any:
        """``request``'s answer as JSON."""
        return self._json(self.request(call, **kwargs))

    def _json(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError as e:  # e.g. --server names some other web server
            raise CliError(
                f"{self.server} answered {response.request.url.path} without JSON; "
                "is it a torchyard server?"
            ) from e

    @contextmanager
    def stream(self, call: Call, **kwargs: Any) -> Iterator[httpx.Response]:
        """A streamed response that is already known to be 2xx; a transport error, also one
        while the caller reads the body, becomes `Unreachable`."""
        _hold_to_endpoint(call, kwargs)
        try:
            with self.http.stream(call.method, call.path, **kwargs) as response:
                if response.status_code >= 400:
                    response.read()
                    self._check(response)
                yield response
        except httpx.TransportError as e:
            raise transport_error(e, server=self.server) from e


# httpx's argument for each kind of body an endpoint declares.
_BODY_ARGUMENT = {"json": "json", "data": "form", "files": "multipart", "content": "content"}


def _hold_to_endpoint(call: Call, kwargs: dict[str, Any]) -> None:
    """A TypeError (a bug in a command, never the user's) for a query parameter or a kind of
    body the endpoint does not declare: what the contract test checks is all that is sent."""
    endpoint = call.endpoint
    unknown = set(kwargs.get("params") or {}) - endpoint.query
    if unknown:
        raise TypeError(f"{endpoint.method} {endpoint.template} has no query {sorted(unknown)}")
    for argument, kind in _BODY_ARGUMENT.items():
        if argument in kwargs and endpoint.body != kind:
            raise TypeError(f"{endpoint.method} {endpoint.template} takes no {kind} body")
