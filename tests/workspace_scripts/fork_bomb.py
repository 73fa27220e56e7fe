"""Forks up to 5,000 children that only sleep (tests/test_e2e_limits.py): held at the run's
max_processes, the job is stopped and its run names the limit."""

import os
import time

children = 0
for _ in range(5000):
    try:
        pid = os.fork()
    except OSError as exc:
        print(f"fork refused after {children} children: {exc}", flush=True)
        break
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    children += 1
time.sleep(600)  # held: only the worker's stop ends it
