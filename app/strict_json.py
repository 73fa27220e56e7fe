"""JSON request bodies the API can store and send back, checked before any route sees them.

Python's json module accepts `NaN` and `Infinity`, which are not JSON: stored in a config they
break every later response that contains it, and PostgreSQL refuses them (and NUL in strings).
A number too large for a float (`1e400`) parses to infinity just the same and is refused too;
so is a string with a lone UTF-16 surrogate (`"\ud800"`): valid JSON text, but no UTF-8
encoding exists for it, so storing or echoing it failed (a 500).
Nesting past a sane depth is refused too, with a message instead of a parser's RecursionError.
A pure ASGI middleware: the body is read once, checked, and handed on unchanged; bodies over
the size limit are passed through untouched for the app's own 413.

The check parses with orjson, which refuses NaN, Infinity, numbers too large for a float and
lone surrogates itself, so what is left is NUL and depth, both read off the body's bytes (a
NUL in a string can only arrive as the escape \\u0000). A body orjson refuses goes the way of
the stdlib parser and a walk of the value, which words the refusal (or leaves malformed JSON
to FastAPI). The stdlib path alone was most of an MLflow log-batch request's CPU time (issue
29: a parse_float call per number, then a walk of every value). The parsed value is kept in
the request's scope under PARSED: a route that reads it there (app/mlflow/errors.py) does
not parse the body a second time.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import Invalid
from app.http_errors import error_response

MAX_DEPTH = 64
_CHECKED_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The scope key of the checked body's parsed value (absent when it was not checked).
PARSED = "torchyard.json"
# Every byte but the structural ones, for bytes.translate's delete.
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'[]{}"')))
_STRING = re.compile(rb'"[^"]*"')
_LEAF = re.compile(rb"\[\]|\{\}")


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


def _too_deep(body: bytes) -> bool:
    """Whether the (valid JSON) body nests deeper than MAX_DEPTH, from its bytes: escapes
    dropped (``\\\\`` first, so ``\\"`` is then an escaped quote), all but brackets and quotes
    deleted, strings (now empty, or brackets as text) removed; then each pass removes the
    innermost containers, so the body is empty after `depth` passes."""
    if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return False
    if b"\\" in body:  # (the two replaces were ~40% of this check on a body without any)
        body = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = body.translate(None, _NOT_STRUCTURE)
    marks = marks.replace(b'""', b"")
    if b'"' in marks:
        marks = _STRING.sub(b"", marks)
    for _ in range(MAX_DEPTH):
        marks = _LEAF.sub(b"", marks)
        if not marks:
            return False
    return True


def parse(body: bytes) -> Any:
    """The body's value; UnfitJSON says why it is refused, a ValueError that it is not JSON."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _parse_slowly(body)
    if b"\\u0000" in body:
        check_value(value)
    elif _too_deep(body):
        raise UnfitJSON(f"JSON nested deeper than {MAX_DEPTH} levels")
    return value


def _parse_slowly(body: bytes) -> Any:
    """The stdlib's parse and a walk of the value: its messages for what orjson refused."""
    try:
        value = json.loads(body, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise UnfitJSON(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    check_value(value)
    return value


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
            try:
                scope[PARSED] = parse(b"".join(m.get("body", b"") for m in read))
            except UnfitJSON as exc:
                refused = Invalid.at(["body"], str(exc), kind="json_invalid")
                await error_response(refused)(scope, receive, send)
                return
            except ValueError:  # malformed JSON or bad encoding: FastAPI's own 422/400 says where
                pass

        async def replay() -> Message:
            return read.pop(0) if read else await receive()

        await self.app(scope, replay, send)
