"""What keeping the series' overviews costs ingest (app/metrics/overview/), in one process:
`ingest_steps` (the forwarder's call) with the overview update on and switched off, rounds
alternated on one SQLite database (the migrated schema, in a temporary data dir), this
process's CPU time per round (the box is shared: wall time is mostly waiting for a core).

- dense: 200,000 points, 4 keys, 10 batches of 5,000 lines (a training run's spool);
- wide: 10,000 keys, 5 batches of one line each (a run logging a value per layer per step).

Prints each case's medians and the ratio with / without (1.0: free).

    .venv/bin/python bench/ingest_overview.py [--rounds 6]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def dense() -> list[list[tuple[int, float, dict[str, Any]]]]:
    return [
        [
            (s, 1e9 + s, {"a": math.sin(s), "b": s * 0.1, "c": 1.0 / (s + 1), "d": -s})
            for s in range(b * 5000, (b + 1) * 5000)
        ]
        for b in range(10)
    ]


def wide() -> list[list[tuple[int, float, dict[str, Any]]]]:
    return [[(s, 1e9 + s, {f"k/{i:05d}": i * 0.5 + s for i in range(10_000)})] for s in range(5)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    os.environ["TORCHYARD_DATA_DIR"] = tempfile.mkdtemp(prefix="torchyard-bench-")
    os.environ.pop("TORCHYARD_DATABASE_URL", None)

    import app.metrics.ingest as ingest
    import app.metrics.overview.stored as overview
    import app.models as models
    from app.db import session_scope
    from app.prestart import prestart
    from tests.factories import add_run

    prestart()
    with session_scope() as session:
        user = models.User(username="bench", password_hash="-")
        session.add(user)
        session.flush()
        owner = user.id
    keep = overview.update_overviews  # ingest imports it from there at each call

    def skip(*_args: Any, **_kwargs: Any) -> None:
        return None

    cases: dict[str, Callable[[], list[list[tuple[int, float, dict[str, Any]]]]]] = {
        "dense (200k points, 4 keys, 10 batches)": dense,
        "wide (10,000 keys, 5 one-line batches)": wide,
    }
    for name, make in cases.items():
        batches = make()
        cpu: dict[str, list[float]] = {"with": [], "without": []}
        for i in range(args.rounds):
            for kind in ("with", "without") if i % 2 == 0 else ("without", "with"):
                overview.update_overviews = keep if kind == "with" else skip
                with session_scope() as session:
                    run_id = add_run(session, owner_id=owner)
                start = time.process_time()
                for lines in batches:
                    with session_scope() as session:
                        ingest.ingest_steps(session, run_id=run_id, steps=lines)
                cpu[kind].append(time.process_time() - start)
        overview.update_overviews = keep
        on, off = statistics.median(cpu["with"]), statistics.median(cpu["without"])
        print(
            f"{name}: CPU with overviews {on:.3f} s, without {off:.3f} s, medians of "
            f"{args.rounds}; ratio {on / off:.2f}"
        )
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
