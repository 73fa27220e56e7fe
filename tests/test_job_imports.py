"""The training process loads only stdlib, numpy and torch; the server's catalog not even torch.

Checked in fresh interpreters, since the test process itself has imported everything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The server's stack, and scikit-learn (whose CSV the digits recipe reads without it).
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
        "load_digits()  # finds scikit-learn's CSV without importing scikit-learn\n"
    )
    assert "torch" in loaded and "numpy" in loaded
    assert loaded.isdisjoint(FORBIDDEN), sorted(loaded & set(FORBIDDEN))


def test_the_recipe_catalog_stays_free_of_torch() -> None:
    """The API server imports the catalog to validate configs; it must not pay for torch."""
    loaded = loaded_top_level_modules("import torchyard.recipes.catalog")
    assert loaded.isdisjoint({"torch", "numpy", *FORBIDDEN})


def test_the_worker_and_the_server_never_import_torch() -> None:
    """Only jobs import torch: the Celery worker (its app, its tasks and all they import) and
    the API stay small when idle (torch was most of an idle worker's memory and start time)."""
    loaded = loaded_top_level_modules(
        "import worker.celery_app, worker.tasks, worker.runner, worker.forwarder, "
        "worker.tensorboard_events, worker.artifacts, app.main\n"
        "app.main.create_app()\n"
        "worker.tensorboard_events._tensorboard_available()  # its lazy protobuf import\n"
        "import fsspec  # the artifact store's, imported when a checkpoint is uploaded\n"
    )
    assert "celery" in loaded and "fastapi" in loaded
    assert "torch" not in loaded and "numpy" not in loaded
