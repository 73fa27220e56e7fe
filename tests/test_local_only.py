"""tests/conftest.py LOCAL_ONLY_MODULES names real modules: a misspelt or stale name would
silently send its module through the PostgreSQL + Redis pass again (or keep nothing out)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import (
    LOCAL_ONLY_MODULES,
    POSTGRES_ONLY_MODULES,
    SERVICES_ONLY_MODULES,
    is_local_only,
    module_key,
)
from tests.pass_coverage import PASSES, QUICK

TESTS = Path(__file__).resolve().parent


def test_every_local_only_name_is_a_test_module() -> None:
    modules = {
        module_key(".".join(("tests", *p.relative_to(TESTS).with_suffix("").parts)))
        for p in TESTS.rglob("test_*.py")
    }
    assert LOCAL_ONLY_MODULES <= modules, sorted(LOCAL_ONLY_MODULES - modules)
    assert POSTGRES_ONLY_MODULES <= modules, sorted(POSTGRES_ONLY_MODULES - modules)


def test_no_module_is_left_out_of_both_passes() -> None:
    assert not LOCAL_ONLY_MODULES & POSTGRES_ONLY_MODULES


def test_the_browser_modules_are_told_apart_from_their_namesakes() -> None:
    assert module_key("tests.browser.test_pages") == "browser.test_pages"
    assert module_key("tests.test_pages") == "test_pages"
    assert "test_pages" not in LOCAL_ONLY_MODULES  # the in-process pages run on both stacks


def test_every_browser_module_runs_in_the_first_pass_only() -> None:
    browser = [p.stem for p in (TESTS / "browser").glob("test_*.py")]
    assert browser
    assert all(is_local_only(f"browser.{name}") for name in browser)
    assert not is_local_only("test_pages")


# What lets a test module reach the suite's database or broker: conftest's fixtures (the live
# stack and the browser pages on it, the in-process app, sessions, users) and the helpers that
# open a database, a stack or a broker of a module's own.
DATABASE_FIXTURES = frozenset(
    {
        "app",
        "client",
        "db",
        "db_sessions",
        "database",  # the suite's database, for a server a module starts (tests/conftest.py)
        "rollback_engine",
        "live_stack",
        "user_headers",
        "admin_headers",
        "page",
        "admin_page",
        "member_page",
        "offline_page",
        "api",
        "mlflow_server",  # the app served on the suite's database (tests/conftest.py)
        "mlflow_login",
    }
)
DATABASE_IMPORTS = (
    "app.db",
    "sqlalchemy",
    "redis",
    "kombu",
    "celery",
    "tests.conftest",
    "tests.databases",
    "tests.factories",
    "tests.stack",
    "tests.own_server",
    "tests.mlflow_server",
)


def reaches_a_database_or_broker(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        elif isinstance(node, ast.FunctionDef):
            if {a.arg for a in node.args.args} & DATABASE_FIXTURES:
                return True
            continue
        else:
            continue
        if any(n == m or n.startswith(m + ".") for n in names for m in DATABASE_IMPORTS):
            return True
    return False


def test_a_module_that_reaches_no_database_or_broker_runs_in_the_first_pass_only() -> None:
    """The services pass is for what the database or the broker changes; a new module that
    can reach neither would only repeat the first pass's minutes there."""
    pure = {
        module_key(".".join(("tests", *p.relative_to(TESTS).with_suffix("").parts)))
        for p in TESTS.rglob("test_*.py")
        if not reaches_a_database_or_broker(p)
    }
    assert pure <= LOCAL_ONLY_MODULES, sorted(pure - LOCAL_ONLY_MODULES)


def _marks(decorators: list[ast.expr]) -> set[str]:
    """`@pytest.mark.NAME` and `pytest.mark.NAME(...)`'s names among decorators or a pytestmark."""
    names = set()
    for node in decorators:
        target = node.func if isinstance(node, ast.Call) else node
        if isinstance(target, ast.Attribute) and ast.unparse(target.value) == "pytest.mark":
            names.add(target.attr)
    return names


def test_no_test_is_marked_out_of_both_passes() -> None:
    """A test both `local_only` and `services_only` (or `postgres_only`) is in neither slow pass:
    a module moved to one pass whose tests still carry the other's marker (issue 38).
    tests/pass_coverage.py shows the same on real collections."""
    both = []
    for path in TESTS.rglob("test_*.py"):
        key = module_key(".".join(("tests", *path.relative_to(TESTS).with_suffix("").parts)))
        tree = ast.parse(path.read_text())
        module = set()
        if is_local_only(key):
            module.add("local_only")
        if key in SERVICES_ONLY_MODULES:
            module.add("services_only")
        if key in POSTGRES_ONLY_MODULES:
            module.add("postgres_only")
        for statement in tree.body:
            if (
                isinstance(statement, ast.Assign)
                and ast.unparse(statement.targets[0]) == "pytestmark"
            ):
                value = statement.value
                module |= _marks(list(value.elts) if isinstance(value, ast.List) else [value])
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name.startswith(
                ("test_", "Test")
            ):
                marks = module | _marks(node.decorator_list)
                if "local_only" in marks and marks & {"services_only", "postgres_only"}:
                    both.append(f"{key}::{node.name}")
    assert not both, both


def test_the_makefiles_runs_are_the_ones_pass_coverage_checks() -> None:
    """tests/pass_coverage.py proves every test runs somewhere for PASSES; the Makefile's
    `-m` expressions must be those (a changed one is changed in both)."""
    makefile = (TESTS.parent / "Makefile").read_text()
    quick = re.search(r"^QUICK := (.+)$", makefile, re.MULTILINE)
    assert quick and quick.group(1) == QUICK
    runs = {
        ("embedded" if kind == "EMBEDDED" else "services", expr.replace("$(QUICK)", QUICK))
        for kind, expr in re.findall(r'\$\((EMBEDDED|SERVICES)_PYTEST\) -m "([^"]+)"', makefile)
    }
    assert runs >= set(PASSES.values()), sorted(set(PASSES.values()) - runs)
