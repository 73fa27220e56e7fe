"""JSON request bodies the API can store and send back, checked before any route sees them.

Python's json module accepts `NaN` and `Infinity`, which are not JSON: stored in a config they
break every later response that contains it, and PostgreSQL refuses them (and NUL in strings).
A number too large for a float (`1e400`) parses to infinity just the same and is refused too;
so is a string with a lone UTF-16 surrogate (`"\ud800"`): valid JSON text, but no UTF-8
encoding exists for it, so storing or echoing it failed (a 500).
Nesting past a sane depth is refused too, with a message instead of a parser's RecursionError.
A pure ASGI middleware: the body is read once, checked, and handed on unchanged; bodies over
the size limit are passed through untouched for the app's own 413.
"""

from __future__ import annotations

import json
import math
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import Invalid
from app.http_errors import error_response

MAX_DEPTH = 64
_CHECKED_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class UnfitJSON(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise UnfitJSON(f"{name} is not valid JSON: send a finite number or null")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise UnfitJSON(f"{text[:40]} is too large for a 64-bit float: send a finite number")
    return number


def _check_text(text: str, what: str) -> None:
    if "\x00" in text:
        raise UnfitJSON(f"a JSON {what} contains NUL (\\u0000)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UnfitJSON(
            f"a JSON {what} contains a lone UTF-16 surrogate (\\ud800-\\udfff), "
            "which is not a character"
        ) from None


def check_value(value: Any) -> None:
    """Depth, NUL and surrogate checks, without recursion (a deep value must not crash the
    checker)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                raise UnfitJSON(f"JSON nested deeper than {MAX_DEPTH} levels")
            children = list(item.items()) if isinstance(item, dict) else list(enumerate(item))
            for key, child in children:
                if isinstance(key, str):
                    _check_text(key, "key")
                stack.append((child, depth + 1))
        elif isinstance(item, str):
            _check_text(item, "string")


def problem(body: bytes) -> str | None:
    """Why this body is refused, or None (also for malformed JSON: FastAPI reports that)."""
    try:
        value = json.loads(body, parse_constant=_reject_constant, parse_float=_finite_float)
    except UnfitJSON as exc:
        return str(exc)
    except RecursionError:
        return f"JSON nested deeper than {MAX_DEPTH} levels"
    except ValueError:  # malformed JSON or bad encoding: FastAPI's own 422/400 says where
        return None
    try:
        check_value(value)
    except UnfitJSON as exc:
        return str(exc)
    return None


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers", []):
        if name == b"content-type":
            media: bytes = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json" or media.endswith(b"+json")
    return False


class StrictJSONMiddleware:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in _CHECKED_METHODS
            or not _is_json(scope)
        ):
            await self.app(scope, receive, send)
            return
        read: list[Message] = []
        size = 0
        while True:
            message = await receive()
            read.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_body_bytes or not message.get("more_body", False):
                break
        complete = read[-1]["type"] == "http.request" and not read[-1].get("more_body", False)
        if complete and size <= self.max_body_bytes:
            why = problem(b"".join(m.get("body", b"") for m in read))
            if why is not None:
                refused = Invalid.at(["body"], why, kind="json_invalid")
                await error_response(refused)(scope, receive, send)
                return

        async def replay() -> Message:
            return read.pop(0) if read else await receive()

        await self.app(scope, replay, send)
