"""A failed pip's message as the run's error (worker/env_build.py): the line that matters
first."""

from __future__ import annotations

from worker.env_build import pip_failure

PIP_OUTPUT = [
    "Looking in indexes: https://pypi.org/simple, file:///opt/pypi/simple",
    "Looking in links: /opt/wheels",
    "ERROR: Could not find a version that satisfies the requirement nope==9 (from versions: none)",
    "ERROR: No matching distribution found for nope==9",
]


def test_pips_error_lines_come_first_and_its_preamble_is_left_out() -> None:
    assert pip_failure(1, PIP_OUTPUT).splitlines() == [
        PIP_OUTPUT[2],
        PIP_OUTPUT[3],
        "pip exited with code 1 building the run's environment",
    ]


def test_pips_other_last_lines_follow_its_errors() -> None:
    output = ["Collecting six", "", "  error: subprocess-exited-with-error", "ERROR: failed"]
    assert pip_failure(2, output).splitlines() == [
        "ERROR: failed",
        "pip exited with code 2 building the run's environment, after:",
        "Collecting six",
        "  error: subprocess-exited-with-error",
    ]
