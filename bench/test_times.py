"""Where the suite's time went: per module, from the JUnit reports `make test` keeps.

`make test` writes one report per pytest run (test-reports/TARGET.xml). The log prints the 25
slowest tests of each run; deciding which module to cut, merge or move to another stream
(issue 38: CI under 40 minutes) needs every module's total, setup included, and its count.

Usage: python bench/test_times.py [REPORT_DIR] [--top N]
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import xml.etree.ElementTree as ET


def module_times(report: pathlib.Path) -> dict[str, tuple[float, int]]:
    """Seconds and test count per test module in one JUnit report (pytest's classname is the
    dotted module path, then the class if any)."""
    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for case in ET.parse(report).iter("testcase"):
        parts = case.get("classname", "").split(".")
        module = next((p for p in parts if p.startswith("test_")), ".".join(parts))
        entry = totals[module]
        entry[0] += float(case.get("time", "0") or 0)
        entry[1] += 1
    return {name: (t, int(n)) for name, (t, n) in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="?", default="test-reports")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    for report in sorted(pathlib.Path(args.reports).glob("*.xml")):
        times = module_times(report)
        whole = sum(t for t, _ in times.values())
        count = sum(n for _, n in times.values())
        print(f"## {report.stem}: {whole:.0f} s in {count} tests, {len(times)} modules")
        for name, (seconds, n) in sorted(times.items(), key=lambda kv: -kv[1][0])[: args.top]:
            print(f"{seconds:8.1f} s {n:5d}  {name}")


if __name__ == "__main__":
    main()
