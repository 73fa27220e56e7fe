"""Allocates (and touches) up to 8 GiB in 32 MiB pieces (tests/test_e2e_limits.py): past the
run's memory_gb the kernel kills it and its run says "out of memory"."""

import time

held = []
for i in range(256):
    held.append(bytearray(32 * 1024**2))  # zero-filled: every page is touched
    if i % 8 == 0:
        print(f"holding {len(held) * 32} MiB", flush=True)
time.sleep(600)
