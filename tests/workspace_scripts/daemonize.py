"""A job that leaves a daemon behind the classic way: fork, setsid, fork again, then exec a
fresh interpreter with an empty environment (`env -i`), so neither the process group, the
session nor an environment marker ties it to the run. Then the job trains (sleeps) until
cancelled. The daemon carries --marker in its argv so the test finds it from outside."""

import argparse
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--marker", required=True)
args = parser.parse_args()

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        code = "import time\nwhile True: time.sleep(1)"
        os.execv("/usr/bin/env", ["env", "-i", sys.executable, "-c", code, args.marker])
    os._exit(0)
os.wait()
print("daemon started", flush=True)
while True:
    time.sleep(0.5)
