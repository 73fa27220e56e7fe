"""What the wheel holds and what its base install imports (issue 38).

A wheel built in a used clone (a `torchyard-data/` full of run files beside the sources) holds
only torchyard's own files, and its `top_level.txt` only our packages; installed without the
`server` extra, its client CLI runs against a live server and never imports the server
(`app`, `worker`, `torchyard.compose`). The quick tests: pyproject names every package of the
tree, and importing any of our modules creates no folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.own_server import OwnServer, own_server
from tests.stack import REPO
from tests.wheel_build import declared_packages

TOP_LEVEL = ("app", "migrations", "torchyard", "worker")
SERVER_CODE = {"app", "worker", "migrations", "fastapi", "sqlalchemy", "celery", "uvicorn"}
SERVER_STACK = {"fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "celery", "torch"}
UV = Path(sys.executable).parent / "uv"


def _clean_env(**extra: str) -> dict[str, str]:
    drop = ("PYTHONPATH", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("TORCHYARD_")}
    return env | extra


def _run(
    argv: Sequence[str | Path],
    cwd: Path,
    env: dict[str, str] | None = None,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        input=input,
        capture_output=True,
        text=True,
        timeout=300,
    )


def tree_packages() -> set[str]:
    """Every folder of our four packages that holds Python modules, as a dotted name."""
    found = set()
    for top in TOP_LEVEL:
        for module in (REPO / top).rglob("*.py"):
            if "__pycache__" not in module.parts:
                found.add(".".join(module.parent.relative_to(REPO).parts))
    return found


def test_pyproject_names_every_package_of_the_tree() -> None:
    declared = declared_packages()
    assert len(declared) == len(set(declared))
    assert set(declared) == tree_packages()


@pytest.mark.slow  # imports everything, torch and MLflow too: ~15 s quiet, 45 s on a loaded box
def test_importing_any_module_creates_no_folder(tmp_path: Path) -> None:
    """Every module of app, worker and torchyard imported in an empty folder, with the default
    data dir (./torchyard-data) and an empty home: nothing appears (app.broker made the data
    dir at import)."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    probe = (
        "import importlib, pkgutil\n"
        "for top in ('app', 'worker', 'torchyard'):\n"
        "    package = importlib.import_module(top)\n"
        "    for m in pkgutil.walk_packages(package.__path__, top + '.'):\n"
        "        if not m.name.endswith('__main__'):\n"
        "            importlib.import_module(m.name)\n"
    )
    # MLflow (imported by torchyard.mlflow_store) writes its telemetry settings under ~ unless
    # told not to: its own doing, not ours.
    env = _clean_env(PYTHONPATH=str(REPO), HOME=str(home), MLFLOW_DISABLE_TELEMETRY="true")
    done = _run([sys.executable, "-P", "-W", "ignore", "-c", probe], cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    made = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert made == ["cwd", "home"]


# --- the wheel of a used clone, and its base install (slow: a build and a venv) -------------


def our_files() -> set[str]:
    """The checkout's files (tracked, or new and not ignored), as a wheel names them: through
    app/templates, the link to templates/."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    files = set(listed)
    files |= {f"app/{name}" for name in listed if name.startswith("templates/")}
    return files


@pytest.mark.slow
def test_a_wheel_built_in_a_used_clone_holds_only_torchyards_files(used_clone_wheel: Path) -> None:
    with zipfile.ZipFile(used_clone_wheel) as wheel:
        names = wheel.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert wheel.read(top_level).decode().split() == list(TOP_LEVEL)
    content = [n for n in names if ".dist-info/" not in n.split("/", 1)[0] + "/"]
    assert not [n for n in content if "torchyard-data" in n]
    assert sorted(set(content) - our_files()) == []
    # the package data is there: templates, static files, Alembic's template, the data set
    for expected in (
        "app/templates/login.html",
        "app/static/app.css",
        "app/static/lib/api.js",
        "migrations/script.py.mako",
        "torchyard/recipes/data/digits.csv.gz",
        "torchyard/cli/endpoints.py",
        "torchyard/compose/api.py",
    ):
        assert expected in content, expected
    assert any(n.startswith("migrations/versions/") for n in content)


@pytest.fixture(scope="module")
def client_venv(used_clone_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel and only its base dependencies (uv: PyPI, through its
    cache); the folder of its scripts."""
    venv = tmp_path_factory.mktemp("client") / "venv"
    cwd = venv.parent
    made = _run([UV, "venv", "-q", "--python", sys.executable, venv], cwd=cwd, env=_clean_env())
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    install: list[str | Path] = [UV, "pip", "install", "-q", "--python", python, used_clone_wheel]
    done = _run(install, cwd=cwd, env=_clean_env())
    assert done.returncode == 0, done.stderr
    return venv / "bin"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnServer]:
    with own_server(tmp_path_factory.mktemp("server")) as running:
        yield running


@pytest.mark.slow
def test_the_base_install_runs_the_client_cli_without_server_code(
    client_venv: Path, server: OwnServer, tmp_path: Path
) -> None:
    installed = _run(
        [client_venv / "python", "-c", "import importlib.metadata as m, json; "
         "print(json.dumps([d.metadata['Name'].lower() for d in m.distributions()]))"],
        cwd=tmp_path, env=_clean_env(),
    )  # fmt: skip
    have = {name.replace("_", "-") for name in json.loads(installed.stdout)}
    assert "torchyard" in have and {"typer", "httpx", "pyyaml", "numpy"} <= have
    assert not have & SERVER_STACK, sorted(have & SERVER_STACK)
    assert not any(name.startswith("nvidia-") for name in have)
    sdk_import = "import torchyard, torchyard.contract; torchyard.init"
    sdk = _run([client_venv / "python", "-c", sdk_import], cwd=tmp_path, env=_clean_env())
    assert sdk.returncode == 0, sdk.stderr

    env = _clean_env(TORCHYARD_CLI_CONFIG=str(tmp_path / "cli.json"), COLUMNS="200")

    def torchyard(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return _run([client_venv / "torchyard", *args], cwd=tmp_path, env=env, input=stdin)

    helped = torchyard("--help")
    assert helped.returncode == 0 and "submit" in helped.stdout, helped.stderr
    password, _headers = server.user("wheel-user")
    login = torchyard(
        "login", "--server", server.base_url, "--username", "wheel-user", "--password-stdin",
        stdin=password + "\n",
    )  # fmt: skip
    assert login.returncode == 0, login.stderr
    (tmp_path / "base-install.yaml").write_text("recipe: tiny_mlp\n")
    submitted = torchyard("submit", "base-install.yaml", "--quiet")
    assert submitted.returncode == 0, submitted.stderr
    run_id = int(submitted.stdout.strip())
    listed = torchyard("ls", "--json", "--owner", "me")
    assert listed.returncode == 0, listed.stderr
    assert [r["id"] for r in json.loads(listed.stdout)] == [run_id]
    # A server command says what to install instead of an ImportError, and makes no folder.
    for server_command in (["db", "current"], ["up", "--data-dir", str(tmp_path / "data")]):
        up = torchyard(*server_command)
        assert up.returncode == 1 and "torchyard[server]" in up.stderr, up.stderr
        assert "Traceback" not in up.stderr
    assert not (tmp_path / "data").exists()

    # What the CLI imported, read in its own process after a client command against the server.
    probe = (
        "import contextlib, io, json, sys\n"
        "from torchyard.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    code = main(['ls', '--json'])\n"
        "print(json.dumps([code, sorted(sys.modules)]))\n"
    )
    done = _run([client_venv / "python", "-c", probe], cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    code, modules = json.loads(done.stdout.splitlines()[-1])
    assert code == 0
    assert "app.main" not in modules
    assert not {m.split(".")[0] for m in modules} & SERVER_CODE
    assert not [m for m in modules if m.startswith("torchyard.compose")]
