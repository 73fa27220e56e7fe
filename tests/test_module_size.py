"""Modules stay under 400 lines: a module that grows past that holds two ideas (style.md)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 400


def test_no_module_of_the_server_worker_or_job_is_over_400_lines() -> None:
    too_long = {
        str(path.relative_to(REPO)): n
        for folder in ("app", "worker", "torchyard")
        for path in sorted((REPO / folder).rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert too_long == {}, f"split these by idea: {too_long}"
