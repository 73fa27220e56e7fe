"""Writes 100 MB into /tmp, then up to 1 GB into the run's folder in 20 MB files
(tests/test_e2e_limits.py): past the run's disk_gb (folder and /tmp together) the worker stops
it and its run says "disk full"."""

import os
import time

chunk = os.urandom(1024**2)
for target, files in (("/tmp", 5), (".", 50)):
    for n in range(files):
        try:
            with open(os.path.join(target, f"fill-{n}.bin"), "wb") as f:
                for _ in range(20):
                    f.write(chunk)
        except OSError as exc:
            print(f"write refused: {exc}", flush=True)
            break
    print(f"wrote {files * 20} MB into {target}", flush=True)
time.sleep(600)  # held: only the worker's stop ends it
