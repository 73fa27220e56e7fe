"""tests/hostile/attacks.py names real tests, and docs/security.md's hostile-member table lists
every attack and test it names: a renamed test or a row left behind fails here."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.hostile.attacks import ATTACKS, hostile_tests

REPO = Path(__file__).resolve().parents[2]


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def test_every_named_test_exists() -> None:
    missing = []
    for test in sorted(hostile_tests()):
        path, _, name = test.partition("::")
        if not (REPO / path).is_file() or name not in _functions(REPO / path):
            missing.append(test)
    assert not missing, missing


def test_the_security_page_lists_every_attack_and_its_tests() -> None:
    page = (REPO / "docs" / "security.md").read_text()
    table = page[page.index("## The hostile-member suite") :]
    for attack, tests in ATTACKS.items():
        assert attack in table, attack
        for test in tests:
            assert f"`{test}`" in table, test
