"""One way to name a run's files and one way to open what a job wrote, kept by a test: a
hand join of a contract name (``run_dir / METRICS_FILE``) or a containment test of its own
(``is_relative_to``, ``O_NOFOLLOW`` walks) anywhere but their one module fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for top in ("app", "worker", "torchyard") for p in (REPO / top).rglob("*.py"))
RUN_FILE_NAMES = (
    "METRICS_FILE|LOG_FILE|CONFIG_FILE|ENVIRONMENT_FILE|CHECKPOINTS_DIR|TENSORBOARD_DIR"
    "|TORCHRUN_LOG_DIR|WORK_DIR|HOME_DIR|ERRORS_DIR"
)
RULES = {
    # RunPaths (torchyard/contract.py) names every file of a run directory.
    "torchyard/contract.py": re.compile(rf"/\s*({RUN_FILE_NAMES})\b|f\"\{{({RUN_FILE_NAMES})\}}/"),
    # torchyard/paths.py: within() is the containment test (the client CLI's too).
    "torchyard/paths.py": re.compile(r"\.is_relative_to\("),
    # app/runs/files/job_files.py: open_in, the link-free walk.
    "app/runs/files/job_files.py": re.compile(r"O_NOFOLLOW\s*\|\s*os\.O_NONBLOCK"),
}


@pytest.mark.parametrize("home", sorted(RULES))
def test_only_its_home_module_does_it(home: str) -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in SOURCES
        if path.relative_to(REPO).as_posix() != home
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if RULES[home].search(line)
    ]
    assert offenders == [], f"use {home} instead:\n" + "\n".join(offenders)
