"""The import rules' checker (tests/import_graph.py) on small source trees: each rule fails on
the break a real change would make, and passes what is not one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.import_graph import (
    cycles,
    import_cycles,
    imports_of,
    job_imports_outside,
    source_tree,
    unnamed_imports,
)


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


def test_a_cycle_is_named_once_per_group_of_modules() -> None:
    graph = {"a": {"b"}, "b": {"c", "a"}, "c": {"a"}, "d": {"d"}, "e": set()}
    assert cycles(graph) == [["a", "b", "a"], ["d", "d"]]
