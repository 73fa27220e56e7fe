"""The training process loads only torchyard, stdlib, numpy and torch; the server's catalog
not even torch.

Checked in fresh interpreters, since the test process itself has imported everything, and in
real jobs started by the one launcher, whose every import ``-X importtime`` reports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The server's stack, and scikit-learn (whose digits CSV torchyard now ships itself).
FORBIDDEN = (
    "sklearn",
    "scipy",
    "pydantic",
    "pydantic_settings",
    "fastapi",
    "starlette",
    "sqlalchemy",
    "alembic",
    "celery",
    "kombu",
    "uvicorn",
    "httpx",
    "app",
)


def loaded_top_level_modules(code: str) -> set[str]:
    probe = (
        code
        + "\nimport json, sys\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout.splitlines()[-1]))


def test_the_job_imports_nothing_of_the_server_stack() -> None:
    loaded = loaded_top_level_modules(
        "import torchyard.job, torchyard.runtime, torchyard.recipes.digits_cnn, "
        "torchyard.recipes.tiny_mlp\n"
        "from torchyard.recipes.digits_data import load_digits\n"
        "load_digits()  # reads the digits CSV shipped in torchyard/recipes/data\n"
    )
    assert "torch" in loaded and "numpy" in loaded
    assert loaded.isdisjoint(FORBIDDEN), sorted(loaded & set(FORBIDDEN))


def test_the_recipe_catalog_stays_free_of_torch() -> None:
    """The API server imports the catalog to validate configs; it must not pay for torch."""
    loaded = loaded_top_level_modules("import torchyard.recipes.catalog")
    assert loaded.isdisjoint({"torch", "numpy", *FORBIDDEN})


def _torch_and_numpy_closure() -> set[str]:
    """The top-level modules of torch, numpy and every distribution they require: torch's
    own lazy imports (sympy while compiling, ...) are torch's, not ours."""
    from importlib import metadata

    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = ["torch", "numpy"]
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return {
        module
        for module, dists in metadata.packages_distributions().items()
        if any(d.lower().replace("_", "-") in seen for d in dists)
    }


def _installed_top_level_modules() -> set[str]:
    from importlib import metadata

    return set(metadata.packages_distributions()) | {"app", "worker", "migrations"}


# Loaded by the job's interpreter at start (site imports sitecustomize from PYTHONPATH): at
# exit, which torchyard.job reaches through the atexit handlers, it writes the top-level names
# of every module the job had loaded.
SITECUSTOMIZE = """
import atexit, json, os, sys

def _dump():
    names = sorted({m.split(".")[0] for m in sys.modules})
    with open(os.environ["IMPORTS_OUT"], "w") as f:
        json.dump(names, f)

atexit.register(_dump)
"""


def _job_imports(tmp_path: Path, name: str, config: dict, script: Path | None = None) -> set[str]:
    from tests.test_recipes import job_launch

    run_dir = tmp_path / name
    run_dir.mkdir()
    probe = tmp_path / "probe"
    probe.mkdir(exist_ok=True)
    (probe / "sitecustomize.py").write_text(SITECUSTOMIZE)
    out = tmp_path / f"{name}.json"
    launch = job_launch(run_dir, config, script=script)
    env = {
        **launch.env,
        "PYTHONPATH": f"{probe}{os.pathsep}{launch.env['PYTHONPATH']}",
        "IMPORTS_OUT": str(out),
    }
    result = subprocess.run(
        launch.argv, cwd=run_dir, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return set(json.loads(out.read_text())) - {"sitecustomize"}


def test_a_real_job_imports_only_torchyard_the_standard_library_numpy_and_torch(
    tmp_path: Path,
) -> None:
    # torch imports what it finds installed (tqdm, ...): what a bare `import torch` loads is
    # torch's too.
    by_torch = loaded_top_level_modules("import numpy, torch, torch.distributed, torch.utils.data")
    allowed = set(sys.stdlib_module_names) | {"torchyard"} | _torch_and_numpy_closure() | by_torch
    # Modules no distribution ships (cython_runtime, _sysconfigdata_*, ...) are made at run
    # time by the interpreter or an extension: only installed packages can break the rule.
    packages = _installed_top_level_modules()
    script = tmp_path / "sdk_script.py"
    script.write_text(
        "import torchyard\n"
        "run = torchyard.init(config={'n': 3})\n"
        "for step in range(1, run.config['n'] + 1):\n"
        "    run.log({'x/y': step * 1.0}, step=step)\n"
    )
    recipe = _job_imports(tmp_path, "recipe", {"recipe": "tiny_mlp", "params": {"epochs": 1}})
    sdk = _job_imports(tmp_path, "script", {"script": script.name}, script=script)
    assert "torchyard" in recipe and "torch" in recipe and "torch" in sdk
    for loaded in (recipe, sdk):
        foreign = {m for m in loaded - allowed if m in packages}
        assert not foreign, sorted(foreign)


def test_the_worker_and_the_server_never_import_torch() -> None:
    """Only jobs import torch: the Celery worker (its app, its tasks and all they import) and
    the API stay small when idle (torch was most of an idle worker's memory and start time)."""
    loaded = loaded_top_level_modules(
        "import app.broker, worker.tasks, worker.runner, worker.forwarder, "
        "worker.tensorboard_events, worker.artifacts, app.main\n"
        "app.main.create_app()\n"
        "worker.tensorboard_events._tensorboard_available()  # its lazy protobuf import\n"
        "import worker.tensorboard_decode\n"
        "worker.tensorboard_decode.decode_hparams(b'')  # the hparams plugin's protobuf\n"
        "import fsspec  # the artifact store's, imported when a checkpoint is uploaded\n"
    )
    assert "celery" in loaded and "fastapi" in loaded
    assert "torch" not in loaded and "numpy" not in loaded


def test_the_worker_and_the_server_import_httpx_only_when_a_session_needs_it() -> None:
    """httpx imports its command line (click, rich and pygments: ~16 MiB of PSS in a bare
    interpreter; the API still gets pygments through Alembic's mako) into every process that
    imports it; the worker and both API processes did, through the sessions' end rules and
    proxy, though only a running session calls them
    (app/sessions/end_rules.py; bench/idle_memory.py)."""
    loaded = loaded_top_level_modules(
        "import app.broker, worker.tasks, worker.runner, worker.forwarder, app.scheduled\n"
        "import torchyard.compose.api\n"
        "torchyard.compose.api.create_app()\n"
    )
    assert "celery" in loaded and "fastapi" in loaded
    assert not {"httpx", "rich"} & loaded, sorted({"httpx", "rich"} & loaded)
