"""Test modules mirror the modules they test (tests/layout.py, docs/testing.md "Where a test
lives"): every tests/test_*.py names a module of app, worker, torchyard or migrations (or a
helper of tests/), or is listed with what it covers instead."""

from __future__ import annotations

from tests.layout import CROSS_CUTTING, TO_RENAME, module_names, module_under_test, suite_modules


def test_every_test_module_names_the_module_it_tests_or_is_listed() -> None:
    names = module_names()
    unmapped = [
        name
        for name in suite_modules()
        if module_under_test(name, names) is None and name not in CROSS_CUTTING | TO_RENAME
    ]
    assert not unmapped, (
        "name these test_<module>[_<topic>] after the module they test, or list them in "
        f"tests/layout.py CROSS_CUTTING with what they cover: {unmapped}"
    )


def test_the_lists_name_test_modules_that_exist() -> None:
    present = set(suite_modules())
    stale = sorted((CROSS_CUTTING.keys() | TO_RENAME.keys()) - present)
    assert not stale, f"renamed or gone: take them out of tests/layout.py: {stale}"
    assert not CROSS_CUTTING.keys() & TO_RENAME.keys()


def test_each_planned_name_follows_the_rule_and_is_free() -> None:
    names = module_names()
    wrong = {old: new for old, new in TO_RENAME.items() if module_under_test(new, names) is None}
    assert not wrong, f"these planned names map to no module: {wrong}"
    taken = set(TO_RENAME.values()) & set(suite_modules())
    assert not taken, f"a module of that name exists already: {taken}"


def test_the_rule_on_names_that_break_it() -> None:
    """What the check above would say of a new module: a name of no module, a name that is
    ambiguous alone (`api`, `workspace`), and the forms that do name one."""
    names = module_names()
    assert module_under_test("test_nowhere_at_all", names) is None
    assert module_under_test("test_api", names) is None  # a dozen domains have an api.py
    assert module_under_test("test_workspace", names) is None  # app's and worker's
    assert module_under_test("test_deletion", names) == "app/runs/deletion.py"
    assert module_under_test("test_runs_deletion_blobs", names) == "app/runs/deletion.py"
    assert module_under_test("test_app_runs_deletion", names) == "app/runs/deletion.py"
    assert module_under_test("test_runs_api", names) == "app/runs/api.py"
    assert module_under_test("test_streams_events_resume", names) == "app/runs/streams/events.py"
    assert module_under_test("test_databases", names) == "tests/databases.py"
