"""Import and layering rules of the code base, checked on its source (issue 26).

`app` is the server and owns every table; `worker` is the host agent that calls app's
services. The server never imports the host agent: the broker client, the reaper and the
workspace and snapshot checks are app's, and app's commands start the worker as a process
(`python -m worker`), never load it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

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
        # MLflow's routes answer in MLflow's error shape: their route class maps HTTP errors
        "app/mlflow/errors.py",
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


def modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in the file, at any depth (a function's
    own imports too), relative imports resolved against the file's package."""
    package = _module_name(path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    return imports_in(path.read_text(encoding="utf-8"), package)


def imports_in(source: str, package: str) -> Iterator[tuple[int, str]]:
    """imported() of a module's source text; ``package``: the package it is in."""
    tree = ast.parse(source)
    here = package.split(".")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            yield node.lineno, module
            for alias in node.names:  # `from . import worker` names a module too
                yield node.lineno, f"{module}.{alias.name}"
        elif (  # importlib.import_module("worker...") / __import__("worker...")
            isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (isinstance(node.func, ast.Name) and node.func.id == "__import__")
            )
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def _is_in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def imports_of(package: str, forbidden: str) -> list[str]:
    """Each import statement of ``package`` that names ``forbidden``, once."""
    found: dict[tuple[Path, int], str] = {}
    for path in modules(package):
        for line, module in imported(path):
            if _is_in(module, forbidden):
                found.setdefault((path, line), module)
    return [f"{path.relative_to(REPO)}:{line}: {m}" for (path, line), m in found.items()]


def test_app_imports_nothing_from_the_worker() -> None:
    """Not at the top, not inside a function, not relatively, not through importlib."""
    assert modules("app"), "no app modules found"
    found = imports_of("app", "worker")
    assert not found, "app imports the worker:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("import worker.tasks\n", ["worker.tasks"]),
        (
            "from worker.liveness import reap_forever\n",
            ["worker.liveness", "worker.liveness.reap_forever"],
        ),
        ("def f():\n    from worker import gpus\n", ["worker", "worker.gpus"]),
        ("import importlib\nimportlib.import_module('worker.code')\n", ["worker.code"]),
        ("from app.runs import reaper\nimport workers\n", []),
    ],
)
def test_the_rule_sees_every_form_of_import(source: str, found: list[str]) -> None:
    got = [m for _line, m in imports_in(source, "app") if _is_in(m, "worker")]
    assert got == found


def test_a_relative_import_is_resolved_against_its_package() -> None:
    source = "from ..ops import ready\nfrom . import reaper\n"
    got = [m for _line, m in imports_in(source, "app.runs")]
    assert got == ["app.ops", "app.ops.ready", "app.runs", "app.runs.reaper"]


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (at any depth in the file)."""
    names = {_module_name(path): path for path in modules(package)}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        deps = set()
        for _line, module in imported(path):
            while module and module not in names:  # `from x import name`: the module x
                module = module.rpartition(".")[0]
            if module and module != name:
                deps.add(module)
        graph[name] = deps
    return graph


def cycle_in(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph (its modules in order), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_notifications_package_has_no_import_cycle() -> None:
    """Delivery used to run the trigger checks (delivery -> triggers -> service -> delivery);
    now app.periodic runs them as two jobs (app/notifications/scheduled.py)."""
    graph = import_graph("app")
    notifications = {
        name: {dep for dep in deps if dep.startswith("app.notifications")}
        for name, deps in graph.items()
        if name.startswith("app.notifications")
    }
    assert cycle_in(notifications) is None, " -> ".join(cycle_in(notifications) or [])


def test_a_cycle_is_found_and_named() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert cycle_in(graph) == ["a", "b", "c", "a"]
    assert cycle_in({"a": {"b"}, "b": set()}) is None


# --- the host agent changes data only through app's services ------------------------------

# What a session may be asked directly in the worker: its unit of work (a savepoint, a
# commit), never a query or a row.
SESSION_DATA_METHODS = frozenset(
    {"execute", "scalar", "scalars", "get", "add", "add_all", "delete", "query", "merge"}
)


def _data_access(source: str) -> list[str]:
    """Each way `source` reaches the tables itself: the database library or an app domain's
    ORM models imported (a lazy import inside a function counts), or a query asked of a name
    that holds a session."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        for name in names:
            parts = name.split(".")
            if parts[0] == "sqlalchemy" or (parts[0] == "app" and "models" in parts[1:]):
                found.append(f"imports {name} (line {getattr(node, 'lineno', '?')})")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in {"session", "s", "db"}
            and node.func.attr in SESSION_DATA_METHODS
        ):
            found.append(f"{node.func.value.id}.{node.func.attr} (line {node.lineno})")
    return found


def test_the_data_access_scan_sees_what_it_looks_for() -> None:
    assert _data_access("from sqlalchemy import select") == [
        "imports sqlalchemy (line 1)",
        "imports sqlalchemy.select (line 1)",
    ]
    assert _data_access("def f():\n    from app.runs.models import Run\n")
    assert _data_access("def f(session):\n    session.execute(1)\n") == ["session.execute (line 2)"]
    assert _data_access("from app.db import Session, session_scope") == []
    assert _data_access("def f(session):\n    session.begin_nested()\n") == []


def test_the_worker_changes_data_only_through_app_services() -> None:
    """worker/ is the host agent: it opens app.db.session_scope() and hands the session to
    the owning app module's service; every table has its one writer in app (issue 26)."""
    offenders = {
        path.relative_to(REPO).as_posix(): found
        for path in sorted((REPO / "worker").rglob("*.py"))
        if (found := _data_access(path.read_text()))
    }
    assert offenders == {}
