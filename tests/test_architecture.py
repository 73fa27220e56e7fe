"""Import and layering rules of the code base, checked on its source (issue 26)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "worker", "torchyard")

# The HTTP layer: routes (api.py, *_api.py, views.py and the app-level routers), request
# dependencies, the app factory and the one mapping of domain errors (app/http_errors.py).
# Everything else raises app.errors' domain errors and never learns a status code.
HTTP_FILE_NAMES = frozenset({"api.py", "views.py", "deps.py"})
HTTP_MODULES = frozenset(
    {
        "app/main.py",
        "app/pages.py",
        "app/http_errors.py",
        "app/static_files.py",
        "app/api_docs.py",
    }
)
HTTP_PACKAGES = ("fastapi", "starlette")


def _in_http_layer(relative: str) -> bool:
    name = relative.rsplit("/", 1)[-1]
    return relative in HTTP_MODULES or name in HTTP_FILE_NAMES or name.endswith("_api.py")


def _http_exception_uses(source: str) -> list[str]:
    """Each way `source` reaches fastapi's (or starlette's) HTTPException: imported by name,
    or as an attribute of those packages (`fastapi.HTTPException`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in HTTP_PACKAGES:
            found += [f"line {node.lineno}" for a in node.names if a.name == "HTTPException"]
        elif isinstance(node, ast.Attribute) and node.attr == "HTTPException":
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in HTTP_PACKAGES:
                found.append(f"line {node.lineno}")
    return found


def test_the_scan_finds_every_way_to_reach_http_exception() -> None:
    assert _http_exception_uses("from fastapi import HTTPException")
    assert _http_exception_uses("from fastapi.exceptions import HTTPException as E")
    assert _http_exception_uses("from starlette.exceptions import HTTPException")
    assert _http_exception_uses("import fastapi\nraise fastapi.HTTPException(404)")
    assert _http_exception_uses("import starlette.exceptions\nstarlette.exceptions.HTTPException")
    # The standard library's has nothing to do with HTTP responses.
    assert not _http_exception_uses("import http.client\nexcept_ = http.client.HTTPException")
    assert not _http_exception_uses("from app.errors import NotFound")


def test_only_the_http_layer_imports_http_exception() -> None:
    """Services and every other module raise app.errors' domain errors; app/http_errors.py
    maps them to HTTP once (issue 26)."""
    offenders = {
        relative: uses
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
        if not _in_http_layer(relative := path.relative_to(REPO).as_posix())
        and (uses := _http_exception_uses(path.read_text()))
    }
    assert offenders == {}, f"raise an app.errors domain error instead: {offenders}"


def _hand_built_field_errors(source: str) -> list[int]:
    """Lines of dict literals shaped like a 422 field error (`loc` and `msg` keys)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if {"loc", "msg"} <= keys:
                lines.append(node.lineno)
    return lines


def test_field_errors_are_built_by_the_one_helper() -> None:
    """`app.errors.field_error` (and `Invalid.at`) build every 422 field error, so its shape
    (FastAPI's type/loc/msg/input) is written once."""
    assert _hand_built_field_errors('x = {"type": "t", "loc": ["query"], "msg": "m"}')
    offenders = {
        relative: lines
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
        if (relative := path.relative_to(REPO).as_posix()) != "app/errors.py"
        and (lines := _hand_built_field_errors(path.read_text()))
    }
    assert offenders == {}, f"use app.errors.field_error: {offenders}"
