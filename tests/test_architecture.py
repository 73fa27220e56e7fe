"""Layering rules of the code base, checked on its source by what the code does (issues 26, 38).

The rules read the import graph of every package of the repository (app, worker, torchyard,
migrations, and any package added beside them) as tests/import_graph.py builds it: each
import at any depth in a file (a function's own, or one under `if TYPE_CHECKING:`), relative
ones resolved, `importlib.import_module` / `__import__` with a constant name whatever it was
imported as, and the package `__init__`s Python runs on the way.

- app is the server and never loads the worker (the host agent): app's commands start it
  as a process (`python -m worker`).
- torchyard is what runs inside a job: it imports only the standard library, numpy, torch and
  itself; a module a library loads through an entry point of pyproject.toml may import that
  library (torchyard.mlflow_store, MLflow's tracking store).
- No import cycle, however long and whichever imports it goes through: an idea split in
  two to stay under the line cap is a package whose modules import one way.
- A dynamic import names its module, but where a test names the place and says why.
- Only the HTTP layer answers in HTTP terms (HTTPException, status codes): the modules that
  declare routes, map errors or provide the request dependencies those use, found by what
  they do (tests/http_layer.py), never by file names; everything else raises app.errors'
  domain errors.

Each rule is also run on small source trees written into tmp_path with the break a real change
would make, and must fail there (tests/test_import_graph.py, tests/test_http_layer.py). The
scan of the worker's data access at the end reads names only, as its own tests say.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.http_layer import Layer, http_outside_the_layer
from tests.import_graph import (
    JOB_PACKAGE,
    Tree,
    import_cycles,
    imports_of,
    is_in,
    job_imports_outside,
    unnamed_imports,
)

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "worker", "torchyard")
# Dynamic imports whose module is not a constant, and why the graph need not know it.
UNNAMED_IMPORTS = {
    "worker.gpus": "pynvml, or the NVML stand-in that settings.nvml_module names",
    "torchyard.job": "a built-in recipe's module, named in torchyard/recipes/catalog.py",
}


@pytest.fixture(scope="module")
def tree() -> Tree:
    return Tree(REPO)


@pytest.fixture(scope="module")
def layer(tree: Tree) -> Layer:
    return Layer(tree)


# --- on the real tree ---------------------------------------------------------------------


def test_the_tree_holds_the_packages(tree: Tree) -> None:
    assert set(PACKAGES) <= set(tree.packages)
    assert all(tree.in_package(p) for p in PACKAGES)


def test_app_never_imports_the_worker(tree: Tree) -> None:
    """Not at the top, not inside a function, not relatively, not through importlib."""
    found = imports_of(tree, "app", "worker")
    assert not found, "app imports the worker:\n" + "\n".join(found)


def test_the_job_package_imports_only_what_a_job_has(tree: Tree) -> None:
    found = job_imports_outside(tree)
    assert not found, f"{JOB_PACKAGE} runs inside jobs:\n" + "\n".join(found)


def test_the_client_cli_loads_no_server_code(tree: Tree) -> None:
    """`pip install torchyard` without `[server]` runs the client: torchyard.cli reaches the
    server only through the composition root, and only from the server commands' own
    modules (which check for the extra first)."""
    found = [
        line
        for forbidden in ("app", "worker", "migrations")
        for line in imports_of(tree, "torchyard.cli", forbidden)
    ]
    found += [
        line
        for line in imports_of(tree, "torchyard.cli", "torchyard.compose")
        if not line.startswith(("torchyard/cli/server.py:", "torchyard/cli/admin.py:"))
    ]
    assert not found, "the client CLI imports server code:\n" + "\n".join(found)


def test_only_the_composition_root_wires_app_and_worker(tree: Tree) -> None:
    """torchyard.compose builds `torchyard up`'s stack; app, worker and the job's modules
    never import it, and nothing but it and the worker imports the worker."""
    found = [
        line
        for package in ("app", "worker", "migrations")
        for line in imports_of(tree, package, "torchyard.compose")
    ]
    found += [
        line
        for line in imports_of(tree, "torchyard", "worker")
        if not line.startswith("torchyard/compose/")
    ]
    assert not found, "\n".join(found)


def test_there_is_no_import_cycle(tree: Tree) -> None:
    found = import_cycles(tree)
    assert not found, "import cycles:\n" + "\n".join(found)


def test_every_dynamic_import_names_its_module(tree: Tree) -> None:
    assert not unnamed_imports(tree, UNNAMED_IMPORTS)
    assert all(tree.modules[name].unnamed for name in UNNAMED_IMPORTS), "a stale entry"


def test_only_the_http_layer_answers_in_http_terms(tree: Tree, layer: Layer) -> None:
    """Services and every other module raise app.errors' domain errors; app/http_errors.py
    maps them to HTTP once (issue 26)."""
    found = http_outside_the_layer(tree, layer)
    assert found == {}, f"raise an app.errors domain error instead: {found}"


def test_the_http_layer_is_found_on_the_tree(layer: Layer) -> None:
    """What the layer is made of, by what the modules do: a guard against a finder that
    quietly finds nothing (and so lets nothing through, or everything)."""
    assert {"app.main", "app.runs.api", "app.pages", "app.mlflow.errors"} <= layer.route_modules
    assert "app.http_errors" in layer.error_mappers
    assert {"app.auth.deps", "app.db", "app.strict_query"} <= layer.dependencies
    assert not {"app.runs.service", "app.templating", "app.errors"} & layer.modules
    assert not any(is_in(name, "worker") or is_in(name, "torchyard") for name in layer.modules)


def _hand_built_field_errors(tree: ast.AST) -> list[int]:
    """Lines of dict literals shaped like a 422 field error (`loc` and `msg` keys)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if {"loc", "msg"} <= keys:
                lines.append(node.lineno)
    return lines


def test_field_errors_are_built_by_the_one_helper(tree: Tree) -> None:
    """`app.errors.field_error` (and `Invalid.at`) build every 422 field error, so its shape
    (FastAPI's type/loc/msg/input) is written once."""
    assert _hand_built_field_errors(ast.parse('x = {"type": "t", "loc": ["query"], "msg": "m"}'))
    offenders = {
        relative: lines
        for module in tree.modules.values()
        if (relative := tree.relative(module)) != "app/errors.py"
        and (lines := _hand_built_field_errors(module.tree))
    }
    assert offenders == {}, f"use app.errors.field_error: {offenders}"


def _location_joins(tree: ast.AST) -> list[int]:
    """Lines that join a field error's location into text by hand: a `.join(...)` whose
    argument reads a `"loc"` (subscript or `.get`)."""
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr != "join":
            continue
        for inner in (n for arg in node.args for n in ast.walk(arg)):
            key = None
            if isinstance(inner, ast.Subscript) and isinstance(inner.slice, ast.Constant):
                key = inner.slice.value
            elif (
                isinstance(inner, ast.Call)
                and isinstance(inner.func, ast.Attribute)
                and inner.func.attr == "get"
                and inner.args
                and isinstance(inner.args[0], ast.Constant)
            ):
                key = inner.args[0].value
            if key == "loc":
                lines.append(node.lineno)
                break
    return lines


def test_field_locations_are_written_by_the_one_formatter(tree: Tree) -> None:
    """torchyard.field_location.location_text writes every location a person reads (the
    server's messages and the client CLI's alike)."""
    assert _location_joins(ast.parse('".".join(str(p) for p in e["loc"])'))
    assert _location_joins(ast.parse('"/".join(e.get("loc", ()))'))
    offenders = {
        relative: lines
        for module in tree.modules.values()
        if (relative := tree.relative(module)) != "torchyard/field_location.py"
        and (lines := _location_joins(module.tree))
    }
    assert offenders == {}, f"use torchyard.field_location.location_text: {offenders}"
