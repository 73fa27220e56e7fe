"""Packing a checkout for `torchyard submit --code`: how long torchyard.cli.pack takes.

A git checkout of --files small source files (50 lines each) in folders of 100, plus one
--big-mb file of random bytes (a data file a user did not ignore; incompressible, so gzip's
worst case) and one ignored file of the same size (it must cost nothing). Packed twice: the
second must give the same digest.

    .venv/bin/python bench/pack_code.py [--files 2000] [--big-mb 50]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from torchyard.cli.pack import pack  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--big-mb", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        for i in range(args.files):
            folder = root / f"pkg{i // 100}"
            folder.mkdir(exist_ok=True)
            (folder / f"mod{i}.py").write_text(f"VALUE_{i} = {i}\n" * 50)
        big = os.urandom(args.big_mb * 1024 * 1024)
        (root / "data.bin").write_bytes(big)
        (root / "ignored.ckpt").write_bytes(big)
        (root / ".gitignore").write_text("*.ckpt\n")
        digests = []
        for attempt in (1, 2):
            started = time.perf_counter()
            packed = pack(root)
            seconds = time.perf_counter() - started
            digests.append(packed.digest)
            print(
                f"pack {attempt}: {len(packed.files)} files, {packed.total_bytes / 1e6:.1f} MB "
                f"-> {packed.size_bytes / 1e3:.0f} kB in {seconds:.2f} s "
                f"({packed.total_bytes / 1e6 / seconds:.1f} MB/s)"
            )
            packed.path.unlink()
        print("same digest both times:", digests[0] == digests[1])


if __name__ == "__main__":
    main()
