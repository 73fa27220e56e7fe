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

Each rule is also run on a small source tree written into tmp_path with the break a real
change would make, and must fail there. The scan of the worker's data access at the end
reads names only, as its own tests say.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path
from textwrap import dedent

import pytest

from tests.http_layer import Layer, http_answers
from tests.import_graph import Tree, cycles, is_in, is_stdlib

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "worker", "torchyard")
JOB_PACKAGE = "torchyard"
JOB_LIBRARIES = frozenset({"numpy", "torch", JOB_PACKAGE})
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


def source_tree(root: Path, files: dict[str, str]) -> Tree:
    """A tree of the given files (path -> source) under ``root``, every folder a package."""
    for relative, text in files.items():
        path = root / relative
        for folder in reversed(path.relative_to(root).parents):
            if folder != Path("."):
                (root / folder).mkdir(exist_ok=True)
                (root / folder / "__init__.py").touch()
        path.write_text(dedent(text))
    return Tree(root)


# --- the rules, as functions of a tree ----------------------------------------------------


def imports_of(tree: Tree, package: str, forbidden: str) -> list[str]:
    """Each import in ``package`` that may load ``forbidden``, as 'file:line: module'."""
    return [
        f"{tree.relative(module)}:{imp.line}: {imp.module or imp.candidates[-1]}"
        for module in tree.in_package(package)
        for imp in module.imports
        if any(is_in(name, forbidden) for name in imp.candidates)
    ]


def plugins(root: Path) -> dict[str, str]:
    """Module -> the library that loads it through an entry point (pyproject.toml)."""
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return {}
    groups = tomllib.loads(pyproject.read_text())["project"].get("entry-points", {})
    return {
        value.partition(":")[0]: group.split(".")[0]
        for group, entries in groups.items()
        for value in entries.values()
    }


def job_imports_outside(tree: Tree) -> list[str]:
    """Each import of the job's package that is not of a library a job has."""
    loaded_by = plugins(tree.root)
    found = []
    for module in tree.in_package(JOB_PACKAGE):
        allowed = JOB_LIBRARIES | {loaded_by.get(module.name, JOB_PACKAGE)}
        for imp in module.imports:
            name = imp.module or imp.candidates[-1]
            if not is_stdlib(name) and name.split(".")[0] not in allowed:
                found.append(f"{tree.relative(module)}:{imp.line}: {name}")
    return found


def import_cycles(tree: Tree) -> list[str]:
    return [" -> ".join(cycle) for cycle in cycles(tree.graph())]


def unnamed_imports(tree: Tree, allowed: dict[str, str]) -> list[str]:
    return [
        f"{tree.relative(module)}:{line}"
        for name, module in tree.modules.items()
        if name not in allowed
        for line in module.unnamed
    ]


def http_outside_the_layer(tree: Tree, layer: Layer | None = None) -> dict[str, list[str]]:
    inside = (layer or Layer(tree)).modules
    return {
        tree.relative(module): found
        for name, module in tree.modules.items()
        if name not in inside and (found := http_answers(tree, module))
    }


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


# --- each rule fails on the break a change would make -------------------------------------


@pytest.mark.parametrize(
    "source",
    [
        "import worker.tasks\n",
        "from worker.liveness import reap_forever\n",
        "def f():\n    from worker import gpus\n",
        "from ... import worker\n",  # app/a/b.py: the repository's top
        "import importlib\nimportlib.import_module('worker.code')\n",
        "from importlib import import_module as load\n\ndef f():\n    load('worker')\n",
        "import importlib as il\nil.import_module('wor' + 'ker.tasks')\n",
        "__import__('worker.tasks')\n",
        "import runpy\nrunpy.run_module('worker')\n",
    ],
)
def test_an_import_of_the_worker_from_app_fails(tmp_path: Path, source: str) -> None:
    tree = source_tree(tmp_path, {"app/a/b.py": source, "worker/tasks.py": ""})
    assert imports_of(tree, "app", "worker")


def test_what_is_not_the_worker_passes(tmp_path: Path) -> None:
    files = {
        "app/a/b.py": "import workers\nfrom app.a import c\nfrom . import worker\n",
        "app/a/worker.py": "import importlib\nimportlib.import_module('.c', __package__)\n",
        "app/a/c.py": "",
    }
    assert imports_of(source_tree(tmp_path, files), "app", "worker") == []


@pytest.mark.parametrize(
    "source",
    [
        "import requests\n",
        "def f():\n    from app.db import session_scope\n",
        "import importlib\nimportlib.import_module('sqlalchemy')\n",
        "import mlflow\n",  # a library only its plugin may import
    ],
)
def test_a_job_module_importing_a_server_library_fails(tmp_path: Path, source: str) -> None:
    tree = source_tree(tmp_path, {"torchyard/runtime/x.py": source})
    assert job_imports_outside(tree)


def test_the_job_s_own_libraries_and_a_plugin_s_library_pass(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "t"\n[project.entry-points."mlflow.tracking_store"]\n'
        't = "torchyard.store:Store"\n'
    )
    files = {
        "torchyard/x.py": "import json, os.path\nimport numpy as np\nimport torch.nn\n"
        "from . import y\nfrom torchyard.y import z\n",
        "torchyard/y.py": "z = 1\n",
        "torchyard/store.py": "from mlflow.store import AbstractStore\n",
    }
    assert job_imports_outside(source_tree(tmp_path, files)) == []


def test_a_cycle_of_function_level_imports_fails(tmp_path: Path) -> None:
    files = {
        "app/metrics/overview.py": "def update():\n    from app.metrics.batch import extend\n",
        "app/metrics/batch.py": "def extend():\n    from app.metrics import overview\n",
    }
    assert import_cycles(source_tree(tmp_path, files)) == [
        "app.metrics.batch -> app.metrics.overview -> app.metrics.batch"
    ]


def test_a_cycle_through_a_package_s_init_fails(tmp_path: Path) -> None:
    """A re-export in an __init__ runs when anything from outside imports the package's
    modules: config/__init__ -> config.validate -> code.service -> config(.model)."""
    files = {
        "app/config/__init__.py": "from app.config.validate import validate\n",
        "app/config/validate.py": "from app.code.service import use\n",
        "app/config/model.py": "",
        "app/code/service.py": "from app.config.model import Model\n",
    }
    assert import_cycles(source_tree(tmp_path, files)) == [
        "app.code.service -> app.config -> app.config.validate -> app.code.service"
    ]


def test_a_package_whose_modules_import_one_way_passes(tmp_path: Path) -> None:
    files = {
        "app/runs/work_dir/__init__.py": "from app.runs.work_dir.download import download\n",
        "app/runs/work_dir/files.py": "import app.runs.work_dir.archive\n",
        "app/runs/work_dir/archive.py": "",
        "app/runs/work_dir/download.py": "from . import files\nfrom .archive import x\n",
        "app/runs/api.py": "from app.runs.work_dir.download import download\n",
    }
    assert import_cycles(source_tree(tmp_path, files)) == []


def test_an_unnamed_dynamic_import_fails(tmp_path: Path) -> None:
    source = "import importlib\n\ndef load(name):\n    return importlib.import_module(name)\n"
    tree = source_tree(tmp_path, {"app/plugins.py": source})
    assert unnamed_imports(tree, {}) == ["app/plugins.py:4"]


ROUTES = """
    import fastapi as fa
    from fastapi import HTTPException

    router = fa.APIRouter()
"""


@pytest.mark.parametrize(
    "service",
    [
        "import fastapi as fa\n\ndef f():\n    raise fa.HTTPException(409)\n",
        "from starlette.exceptions import HTTPException as E\n\ndef f():\n    raise E(409)\n",
        "from app.web.routes import HTTPException\n",  # a re-export through a route module
        "import app.web.routes as w\n\ndef f():\n    raise w.HTTPException(404)\n",
        "from fastapi.responses import JSONResponse\n\ndef f():\n"
        "    return JSONResponse({'a': 1}, status_code=409)\n",
        "from fastapi import Response, status\n\ndef f():\n"
        "    return Response(status_code=status.HTTP_409_CONFLICT)\n",
        "from starlette.status import HTTP_404_NOT_FOUND\n",
        "import starlette.responses as r\nCONFLICT = 409\n\ndef f():\n"
        "    return r.PlainTextResponse('no', CONFLICT)\n",
        "from http import HTTPStatus\n\ndef f(response):\n"
        "    response.status_code = HTTPStatus.CONFLICT\n",
    ],
)
@pytest.mark.parametrize("name", ["app/svc/service.py", "app/svc/api.py"])
def test_a_module_declaring_no_routes_answering_in_http_fails(
    tmp_path: Path, service: str, name: str
) -> None:
    """A route-less module is outside the layer, whatever its file is called."""
    tree = source_tree(tmp_path, {"app/web/routes.py": ROUTES, name: service})
    assert list(http_outside_the_layer(tree)) == [name]


def test_the_http_layer_is_what_declares_routes(tmp_path: Path) -> None:
    files = {
        "app/web/routes.py": ROUTES,
        "app/web/handlers.py": """
            from fastapi import status
            from app.web.routes import router
            from app.web.guard import Guard

            @router.post("/x", status_code=status.HTTP_201_CREATED)
            def create(guard: Guard) -> None: ...
        """,
        "app/web/guard.py": """
            from typing import Annotated
            from fastapi import Depends, HTTPException
            from app.web.checks import check

            def guard() -> None:
                raise HTTPException(403)

            Guard = Annotated[None, Depends(guard), Depends(check)]
        """,
        "app/web/checks.py": "from fastapi import HTTPException\n\ndef check(): ...\n",
        "app/web/route_class.py": "from fastapi.routing import APIRoute as R\n\nclass C(R): ...\n",
        "app/web/mapping.py": """
            from fastapi import FastAPI
            from fastapi.responses import JSONResponse

            def install(app: FastAPI) -> None:
                app.add_exception_handler(ValueError, lambda r, e: JSONResponse({}, 422))
        """,
        "app/web/senders.py": """
            import http.client

            def post(connection):
                try:
                    response = connection.getresponse()
                except http.client.HTTPException:
                    return None
                return response.status_code >= 400  # reading a status is a client's business
        """,
        "app/web/render.py": """
            from fastapi.templating import Jinja2Templates
            templates = Jinja2Templates(directory=".")

            def render(request, name, status_code=200):
                return templates.TemplateResponse(request, name, {}, status_code=status_code)
        """,
    }
    tree = source_tree(tmp_path, files)
    layer = Layer(tree)
    assert layer.route_modules == {"app.web.routes", "app.web.handlers", "app.web.route_class"}
    assert layer.error_mappers == {"app.web.mapping"}
    assert layer.dependencies == {"app.web.guard", "app.web.checks"}
    # the standard library's HTTPException is a client's; render passes on its caller's status
    assert http_outside_the_layer(tree) == {}


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
                found.append(f"imports {name} (line {node.lineno})")
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
