"""Every slow test module is classified for `make test`'s phases (tests/phases.py): a new slow
module left out would run side by side by default, where a tight time bound of its own could
fail under the other stream's load; a stale or misspelt name would classify nothing."""

from __future__ import annotations

import re
from pathlib import Path

from tests.phases import (
    FIRST_STREAM_BROWSER_MODULES,
    SECOND_STREAM_MODULES,
    SIDE_BY_SIDE_MODULES,
    TIMED_MODULES,
)

TESTS = Path(__file__).resolve().parent
SLOW = re.compile(r"pytest\.mark\.slow\b")
TIMED = re.compile(r"pytest\.mark\.timed\b")


def modules_marking(pattern: re.Pattern[str]) -> set[str]:
    """The test modules outside tests/browser/ whose source uses the mark."""
    return {p.stem for p in TESTS.glob("test_*.py") if pattern.search(p.read_text())}


def test_every_slow_module_is_timed_or_side_by_side_and_not_both() -> None:
    slow = modules_marking(SLOW)
    unclassified = slow - TIMED_MODULES - SIDE_BY_SIDE_MODULES
    assert not unclassified, f"classify these in tests/phases.py: {sorted(unclassified)}"
    assert not TIMED_MODULES & SIDE_BY_SIDE_MODULES


def test_every_classified_name_is_a_module_with_slow_tests() -> None:
    slow = modules_marking(SLOW)
    assert (TIMED_MODULES | SIDE_BY_SIDE_MODULES) <= slow, sorted(
        (TIMED_MODULES | SIDE_BY_SIDE_MODULES) - slow
    )


def test_single_timed_tests_are_in_side_by_side_modules() -> None:
    """A timed module's tests are all timed already (conftest marks them): a mark there says
    nothing, and a reader would think the module's other tests are not timed."""
    assert modules_marking(TIMED) <= SIDE_BY_SIDE_MODULES, sorted(
        modules_marking(TIMED) - SIDE_BY_SIDE_MODULES
    )


def test_the_second_streams_modules_run_side_by_side() -> None:
    """A timed module there would run beside the other stream, its bounds under its load."""
    assert SECOND_STREAM_MODULES <= SIDE_BY_SIDE_MODULES, sorted(
        SECOND_STREAM_MODULES - SIDE_BY_SIDE_MODULES
    )


def test_the_first_streams_browser_modules_are_browser_modules() -> None:
    """A misspelt name would leave its module in the second stream, unbalancing the two."""
    browser = {p.stem for p in (TESTS / "browser").glob("test_*.py")}
    assert FIRST_STREAM_BROWSER_MODULES <= browser, sorted(FIRST_STREAM_BROWSER_MODULES - browser)
