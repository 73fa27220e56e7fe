"""`torchyard import aim` from a repository written by Aim's own `aim.Run` (track with contexts,
params, tags; one run killed before it closed), run where Aim is installed: `.venv-aim`
(`make aim-venv`: aim's filelock<4 cap would move the test venv's filelock, which the server's
torch resolves to 4.x; a laptop that imports needs no server extra either). Every point at its
step with its context, wall times inside the writer's lifetime, params flattened, status; a
second import adds nothing; a corrupt run database is named and the other runs come in; a
corrupt repository is an error naming it before anything is written."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.mlflow_server import imported_runs, importer_token, torchyard_server  # noqa: F401
from torchyard.cli.importers.sink import RUN_ID_TAG

pytestmark = pytest.mark.slow
AIM_VENV = Path(__file__).resolve().parent.parent / ".venv-aim"
STEPS = 200

SCRIPT = (
    f"STEPS = {STEPS}\n"
    + """
import os, sys, aim
for name, lr in (("good", 0.1), ("killed", 0.01)):
    run = aim.Run(repo=sys.argv[1], experiment="vision", log_system_params=True,
                  system_tracking_interval=None, capture_terminal_logs=False)
    run.name = name
    run["hparams"] = {"lr": lr, "optimizer": {"name": "adam", "betas": [0.9, 0.99]}}
    run["seed"] = 7
    run.add_tag("baseline")
    for step in range(STEPS):
        run.track(1.0 / (1 + lr * step), name="loss", step=step, context={"subset": "train"})
        run.track(2.0 / (1 + lr * step), name="loss", step=step, context={"subset": "val"})
        if step % 10 == 0:
            run.track(step / STEPS, name="acc", step=step, epoch=step // 10)
            run.track(aim.Text("sample"), name="note", step=step)
    if name == "good":
        run.close()
    else:
        os._exit(0)  # the process dies: this run is never closed
"""
)


def aim_python() -> Path:
    python = AIM_VENV / "bin" / "python"
    if not python.exists():
        pytest.fail(f"no Aim venv at {AIM_VENV}: run `make aim-venv`")
    return python


def write_repo(folder: Path) -> tuple[float, float]:
    folder.mkdir()
    before = time.time()
    done = run_aim(["-c", SCRIPT, str(folder)], folder)
    assert done.returncode == 0, done.stderr
    return before, time.time()


def run_aim(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIM_", "TORCHYARD_"))}
    return subprocess.run([str(aim_python()), *argv], cwd=cwd, env=env | {"HOME": str(cwd)},
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def import_aim(repo: Path, into: str, server: str, token: str) -> subprocess.CompletedProcess[str]:
    argv = ["-m", "torchyard.cli", "import", "aim", str(repo), "-e", into,
            "--server", server, "--token", token]  # fmt: skip
    return run_aim(argv, repo.parent)


def loss(lr: float, step: int) -> float:
    return 1.0 / (1 + lr * step)


def test_every_point_of_every_context_comes_in_once(
    server: str, token: str, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    before, after = write_repo(repo)
    into = f"aim-{secrets.token_hex(3)}"
    done = import_aim(repo, into, server, token)
    assert done.returncode == 0, done.stderr
    assert f"imported 2 runs ({2 * (2 * STEPS + STEPS // 10):,} points" in done.stderr
    assert "texts (note): values not imported" in done.stderr
    runs = {r.info.run_name: r for r in imported_runs(server, into, RUN_ID_TAG).values()}
    assert sorted(runs) == ["good", "killed"]
    client = MlflowClient(tracking_uri=server)
    for name, lr, status in (("good", 0.1, "FINISHED"), ("killed", 0.01, "KILLED")):
        run = client.get_run(runs[name].info.run_id)
        assert run.info.status == status
        assert run.data.params == {
            "hparams.lr": str(lr),
            "hparams.optimizer.name": "adam",
            "hparams.optimizer.betas": "[0.9, 0.99]",
            "seed": "7",
        }  # fmt: skip: __system_params (env variables, argv) left out
        assert run.data.tags["aim.tag.baseline"] == "true"
        assert run.data.tags["imported"] == "aim"
        for key, scale in (("loss/subset=train", 1.0), ("loss/subset=val", 2.0)):
            history = sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)
            assert [(m.step, m.value) for m in history] == [
                (s, scale * loss(lr, s)) for s in range(STEPS)
            ]
            assert all(before * 1000 <= m.timestamp <= after * 1000 for m in history)
        acc = sorted(client.get_metric_history(run.info.run_id, "acc"), key=lambda m: m.step)
        assert [(m.step, m.value) for m in acc] == [(s, s / STEPS) for s in range(0, STEPS, 10)]
        assert before * 1000 <= run.info.start_time <= run.info.end_time <= after * 1000

    again = import_aim(repo, into, server, token)
    assert again.returncode == 0 and "2 runs were imported before" in again.stderr
    assert len(imported_runs(server, into, RUN_ID_TAG)) == 2


def test_a_corrupt_run_database_is_named_and_the_other_runs_come_in(
    server: str, token: str, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    write_repo(repo)
    chunks = sorted((repo / ".aim" / "meta" / "chunks").iterdir())
    assert len(chunks) == 2
    for file in chunks[0].iterdir():
        file.write_bytes(b"\x00not rocksdb" * 100)
    into = f"aim-cut-{secrets.token_hex(3)}"
    done = import_aim(repo, into, server, token)
    assert done.returncode == 1
    assert f"skipped: {chunks[0]}: corrupt run database" in done.stderr
    assert "imported 1 runs" in done.stderr
    assert list(imported_runs(server, into, RUN_ID_TAG)) == [chunks[1].name]


def test_a_corrupt_repository_is_an_error_naming_it(
    server: str, token: str, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    write_repo(repo)
    (repo / ".aim" / "run_metadata.sqlite").write_bytes(b"not a database" * 1000)
    into = f"aim-bad-{secrets.token_hex(3)}"
    done = import_aim(repo, into, server, token)
    assert done.returncode == 1
    assert f"{repo / '.aim'}: not a readable Aim repository" in done.stderr
    assert "Traceback" not in done.stderr
    assert MlflowClient(tracking_uri=server).get_experiment_by_name(into) is None


def test_a_folder_without_an_aim_repository_is_named(
    server: str, token: str, tmp_path: Path
) -> None:
    done = import_aim(tmp_path, "never", server, token)
    assert done.returncode == 1
    assert f"{tmp_path}: not an Aim repository (no .aim folder in it)" in done.stderr
