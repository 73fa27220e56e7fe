"""A run's environment (worker/environments.py): how long a build takes, and a reuse.

Builds the environment for --requirement (a small pure-Python wheel from this machine's
package index, the worker's pip configuration) --builds times, each in a fresh cache folder,
then asks for it --reuses times from the last one: the time the run's log reports
("environment <key> built|reused in X s"): the cache key (the requirements and the worker's
package set), the lock, and the build when there is one. It also reports the environment's
size on disk and whether it holds a torch of its own (it must not).

    .venv/bin/python bench/env_cache.py [--builds 3] [--reuses 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    from worker.env_build import Pip
    from worker.environments import MARKER, Cache, Env

    parser = argparse.ArgumentParser()
    parser.add_argument("--requirement", default="tomli-w==1.2.0")
    parser.add_argument("--builds", type=int, default=3)
    parser.add_argument("--reuses", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="torchyard-env-bench-") as tmp:
        log_dir = Path(tmp) / "log"
        log_dir.mkdir()
        builds: list[float] = []
        envs: list[Env] = []
        cache = Cache(Path(tmp), 10**12)
        for i in range(args.builds):
            cache = Cache(Path(tmp) / f"cache{i}", 10**12)
            with cache.use([args.requirement], Pip(log_dir, 600)) as built:
                assert built.built
                builds.append(built.seconds)
        reuses: list[float] = []
        for _ in range(args.reuses):
            with cache.use([args.requirement], Pip(log_dir, 600)) as reused:
                assert not reused.built
                reuses.append(reused.seconds)
                envs.append(reused)
        env = envs[-1]
        size = (env.path / MARKER).read_text()
        torch_copies = list(env.path.glob("lib/python*/site-packages/torch"))
        print(f"requirement: {args.requirement}")
        print(f"build  (s): median {statistics.median(builds):.2f}, all {builds!r}")
        print(
            f"reuse  (s): median {statistics.median(reuses):.4f}, max {max(reuses):.4f} "
            f"over {len(reuses)}"
        )
        print(f"record: {size}")
        print(f"torch copies in the environment: {len(torch_copies)}")


if __name__ == "__main__":
    main()
