"""A process per CPU of the host, each wanting its CPU whole, for ten minutes at most
(tests/test_e2e_host_share.py: the job's share of a host with a hog of the test beside it)."""

import os
import time

BURNERS = os.cpu_count() or 1
for _ in range(BURNERS - 1):
    if os.fork() == 0:
        break  # a child burns too, and forks no more
else:  # the first process, its forks done: the test measures from this line on
    print(f"burning on {BURNERS} CPUs", flush=True)
end = time.monotonic() + 600
while time.monotonic() < end:
    pass
