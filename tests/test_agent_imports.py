"""The host agent's modules change data only through app services: none of them imports the
database library or an app domain's ORM models (they open app.db.session_scope and hand the
session to a service). Checked on the source, so a lazy import inside a function counts."""

from __future__ import annotations

import ast
from pathlib import Path

WORKER = Path(__file__).resolve().parent.parent / "worker"

# The host agent proper: processes, environments, GPUs, system sampling and the loops that
# watch a job. (The stores' modules, worker/forwarder.py and friends, are moving to app.)
AGENT = [
    "runner",
    "watch",
    "supervise",
    "adoption",
    "spool",
    "spool_lines",
    "system_metrics",
    "env_build",
    "job_records",
    "process",
    "keeper",
    "gpus",
    "environments",
    "heartbeat",
    "backoff",
    "db_retry",
    "ingest_steps",
]


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def forbidden(name: str) -> bool:
    parts = name.split(".")
    return (
        parts[0] == "sqlalchemy"
        or name == "app.models"
        or (parts[0] == "app" and len(parts) > 2 and parts[2] == "models")
    )


def test_the_agents_modules_import_no_database_library_and_no_models() -> None:
    found = {
        module: sorted(name for name in imported(WORKER / f"{module}.py") if forbidden(name))
        for module in AGENT
    }
    assert {m: names for m, names in found.items() if names} == {}


def test_the_scan_sees_a_models_import() -> None:
    assert forbidden("app.runs.models") and forbidden("sqlalchemy.orm") and forbidden("app.models")
    assert not forbidden("app.runs.lifecycle") and not forbidden("app.db")
