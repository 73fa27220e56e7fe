"""Building torchyard's wheel the way a user does: in a copy of the whole checkout (its
`torchyard-data/` and anything else a used clone holds included), with nothing of this
checkout's build/ or egg-info in it. The suite builds one, of a used clone (tests/conftest.py's
`used_clone_wheel`), for tests/test_packaging.py and tests/test_wheel.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.stack import REPO

# What a checkout holds that is not source: version control, virtual environments, caches.
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "node_modules", "__pycache__", "*.pyc", "*.egg-info", "build", "dist"
)


def copy_checkout(dst: Path) -> Path:
    """A copy of the checkout (links kept as links: app/templates is one) at ``dst``."""
    shutil.copytree(REPO, dst, symlinks=True, ignore=NOT_SOURCE)
    return dst


def build_wheel(src: Path, out: Path) -> Path:
    """`pip wheel` of ``src`` into ``out``; the wheel's path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(out), str(src)],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    (built,) = out.glob("torchyard-*.whl")
    return built


def declared_packages() -> list[str]:
    """The packages pyproject.toml names (tool.setuptools.packages)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    return list(pyproject["tool"]["setuptools"]["packages"])


def build_used_clone_wheel(root: Path) -> Path:
    """The wheel of a copy of the checkout that has been used (a `torchyard-data/` of run
    files, a database and run environments beside the sources), built under ``root``."""
    src = copy_checkout(root / "clone" / "torchyard")
    run = src / "torchyard-data" / "runs" / "1"
    (run / "work").mkdir(parents=True)
    (run / "work" / "train.py").write_text("print('a user script')\n")
    (run / "report.html").write_text("<p>a report</p>\n")
    (src / "torchyard-data" / "torchyard.db").write_bytes(b"SQLite format 3\x00")
    (src / "torchyard-data-envs" / "abc").mkdir(parents=True)
    (src / "torchyard-data-envs" / "abc" / "pyvenv.cfg").write_text("home = /usr\n")
    return build_wheel(src, root / "dist")
