"""Two processes that want a CPU each, for ten minutes at most (tests/test_e2e_host_share.py:
the job's share of a host with a hog of the test's beside it)."""

import os
import time

if os.fork() == 0:
    pass  # the child burns too
end = time.monotonic() + 600
while time.monotonic() < end:
    pass
