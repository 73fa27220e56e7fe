"""The worker's half of storing a run's outputs (metrics, log, checkpoints, TensorBoard data,
the environment record, the work dir's files) reads what the job wrote and hands it to the
app modules that own the tables: none of these worker modules imports the database library or
an app domain's ORM models, and none runs SQL of its own. Checked on the source, so a lazy
import inside a function counts."""

from __future__ import annotations

import ast
from pathlib import Path

WORKER = Path(__file__).resolve().parent.parent / "worker"

STORES = [
    "forwarder",
    "artifacts",
    "provenance",
    "tensorboard_events",
    "tensorboard_decode",
    "tfrecord",
    "run_log",
    "work_dir_upload",
]
# What a session may be asked directly: its unit of work, never a query.
SQL_METHODS = {"execute", "scalar", "scalars", "get", "add", "add_all", "delete", "query"}


def forbidden_imports(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return sorted({n for n in names if is_forbidden(n)})


def is_forbidden(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "sqlalchemy" or (parts[0] == "app" and "models" in parts[1:])


def session_queries(tree: ast.AST) -> list[str]:
    """Calls like ``session.execute(...)``/``s.get(...)`` on a name that holds a session."""
    return [
        f"{node.func.value.id}.{node.func.attr} (line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in {"session", "s", "db"}
        and node.func.attr in SQL_METHODS
    ]


def test_the_store_modules_of_the_worker_import_no_database_library_and_no_models() -> None:
    found = {m: forbidden_imports(ast.parse((WORKER / f"{m}.py").read_text())) for m in STORES}
    assert {m: names for m, names in found.items() if names} == {}


def test_the_store_modules_of_the_worker_run_no_queries_of_their_own() -> None:
    found = {m: session_queries(ast.parse((WORKER / f"{m}.py").read_text())) for m in STORES}
    assert {m: calls for m, calls in found.items() if calls} == {}


def test_the_checks_see_what_they_look_for() -> None:
    tree = ast.parse(
        "from sqlalchemy import select\nfrom app.runs.models import Run\n"
        "def f(session):\n    session.execute(select(Run))\n"
    )
    assert forbidden_imports(tree) == [
        "app.runs.models",
        "app.runs.models.Run",
        "sqlalchemy",
        "sqlalchemy.select",
    ]
    assert session_queries(tree) == ["session.execute (line 4)"]
    assert forbidden_imports(ast.parse("from app.db import Session, session_scope")) == []
