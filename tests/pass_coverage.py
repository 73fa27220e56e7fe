"""Every collected test runs in at least one of `make test`'s pytest runs (issue 38: a test moved
to one pass must not fall out of both).

    .venv/bin/python -m tests.pass_coverage [--postgres-url URL] [--redis-url URL]

Collects the whole suite twice, once in each pass's environment (the Makefile's
EMBEDDED_PYTEST and SERVICES_PYTEST: the services one parametrizes some tests over both
databases), with this module as a plugin that writes each test's markers; then selects what
each of `make test`'s nine runs selects (PASSES: their `-m` expressions, which
tests/test_local_only.py keeps equal to the Makefile's) and prints, for every module with slow
tests, which runs take its slow tests. Exits 1 naming every test that no run selects.
Collection only: nothing runs, but the services collection resets the PostgreSQL database it
is given (tests/conftest.py), so give it one of your own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

REPO = Path(__file__).resolve().parent.parent
OUT_ENV = "TORCHYARD_PASS_COVERAGE_OUT"

QUICK = "not slow and not browser"
EMBEDDED_SLOW = f"not postgres_only and not services_only and not ({QUICK}) and not browser"
SERVICES_SLOW = f"not local_only and not ({QUICK})"
# `make test`'s pytest runs: name -> (environment, -m expression), as in the Makefile.
PASSES: dict[str, tuple[str, str]] = {
    "embedded quick": ("embedded", f"not postgres_only and {QUICK}"),
    "services quick": ("services", f"not local_only and {QUICK}"),
    "browser": ("embedded", "not postgres_only and browser and not browser_first"),
    "browser first": ("embedded", "not postgres_only and browser and browser_first"),
    "embedded slow": ("embedded", f"{EMBEDDED_SLOW} and not timed and not second_stream"),
    "embedded second": ("embedded", f"{EMBEDDED_SLOW} and not timed and second_stream"),
    "services slow": ("services", f"{SERVICES_SLOW} and not timed"),
    "embedded timed": ("embedded", f"{EMBEDDED_SLOW} and timed"),
    "services timed": ("services", f"{SERVICES_SLOW} and timed"),
}


def pytest_collection_finish(session: pytest.Session) -> None:
    """As a plugin (`-p tests.pass_coverage`): each collected test's markers, to OUT_ENV."""
    out = os.environ.get(OUT_ENV)
    if out:
        marks = {
            item.nodeid: sorted({m.name for m in item.iter_markers()}) for item in session.items
        }
        Path(out).write_text(json.dumps(marks))


def environments(postgres_url: str, redis_url: str) -> dict[str, dict[str, str]]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")}
    return {
        "embedded": {**base, "TORCHYARD_TEST_REDIS_URL": redis_url},
        "services": {
            **base,
            "TORCHYARD_DATABASE_URL": postgres_url,
            "TORCHYARD_TEST_POSTGRES_URL": postgres_url,
            "TORCHYARD_BROKER_URL": redis_url,
            "TORCHYARD_TEST_REDIS_URL": redis_url,
        },
    }


def collect(env: dict[str, str]) -> dict[str, list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "marks.json"
        argv = [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider"]
        done = subprocess.run(
            [*argv, "-p", "tests.pass_coverage"],
            cwd=REPO,
            env={**env, OUT_ENV: str(out)},
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 or not out.exists():
            raise SystemExit(f"collection failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        marks: dict[str, list[str]] = json.loads(out.read_text())
        return marks


def selects(expression: str, marks: list[str]) -> bool:
    names = set(marks)

    def marked(name: str, /, **kwargs: str | int | bool | None) -> bool:
        return name in names

    return Expression.compile(expression).evaluate(marked)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres-url", required=True, help="a PostgreSQL database of yours")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/9")
    args = parser.parse_args()
    collected = {
        name: collect(env) for name, env in environments(args.postgres_url, args.redis_url).items()
    }
    ran: dict[str, set[str]] = defaultdict(set)  # test id -> the runs that select it
    for run, (env_name, expression) in PASSES.items():
        for nodeid, marks in collected[env_name].items():
            if selects(expression, marks):
                ran[nodeid].add(run)
    every = set(collected["embedded"]) | set(collected["services"])
    slow: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for env_name in ("embedded", "services"):
        for nodeid, marks in collected[env_name].items():
            if "slow" in marks and "browser" not in marks:
                for run in ran[nodeid] & {f"{env_name} slow", f"{env_name} timed"}:
                    slow[nodeid.split("::")[0]][run] += 1
    for module in sorted(slow):
        print(f"{module}: " + ", ".join(f"{run} {n}" for run, n in sorted(slow[module].items())))
    counts = {run: sum(run in r for r in ran.values()) for run in PASSES}
    print(f"{len(every)} tests collected; selected per run: {counts}")
    missing = sorted(every - set(ran))
    for nodeid in missing:
        print(f"in no run: {nodeid}")
    print("every test runs in at least one run" if not missing else f"{len(missing)} in no run")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
