"""Each test module's time (setup, call and teardown of its tests) at the end of a run, the
largest first: CI's log keeps only its tail, and the 25 slowest tests alone did not say where
a pass's minutes went (issue 26, docs/testing.md)."""

from __future__ import annotations

from collections import defaultdict

import pytest

SHOWN = 20
_seconds: defaultdict[str, float] = defaultdict(float)
_tests: defaultdict[str, set[str]] = defaultdict(set)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0]
    _seconds[module] += report.duration
    _tests[module].add(report.nodeid)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _seconds:
        return
    total = sum(_seconds.values())
    terminalreporter.section(f"time by module ({total:.0f} s in tests)")
    ranked = sorted(_seconds.items(), key=lambda item: -item[1])
    for module, seconds in ranked[:SHOWN]:
        terminalreporter.write_line(f"{seconds:8.1f} s {len(_tests[module]):5d} tests  {module}")
    rest = ranked[SHOWN:]
    if rest:
        left = sum(seconds for _, seconds in rest)
        terminalreporter.write_line(f"{left:8.1f} s in the {len(rest)} other modules")
