"""A Slurm run's job looking past its boundary (tests/test_slurm_boundary.py): its uid, the
files it reads (--read, comma-separated paths), whether a TCP listener on the host's
127.0.0.1:--port answers, and what its environment holds of --env (comma-separated
names). Prints one line `PROBE {json}`."""

import argparse
import json
import os
import socket

parser = argparse.ArgumentParser()
parser.add_argument("--read", default="")
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--env", default="")
args = parser.parse_args()

read = {}
for path in filter(None, args.read.split(",")):
    try:
        with open(path, "rb") as f:
            f.read(16)
        read[path] = "read"
    except OSError as exc:
        read[path] = exc.strerror or str(exc)

try:
    with socket.create_connection(("127.0.0.1", args.port), timeout=3):
        loopback = "connected"
except OSError as exc:
    loopback = exc.strerror or str(exc)

found = {
    "uid": os.getuid(),
    "euid": os.geteuid(),
    "read": read,
    "loopback": loopback,
    "env": {name: os.environ.get(name) for name in filter(None, args.env.split(","))},
}
print("PROBE " + json.dumps(found), flush=True)
