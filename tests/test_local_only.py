"""tests/conftest.py LOCAL_ONLY_MODULES names real modules: a misspelt or stale name would
silently send its module through the PostgreSQL + Redis pass again (or keep nothing out)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LOCAL_ONLY_MODULES, POSTGRES_ONLY_MODULES, module_key

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
