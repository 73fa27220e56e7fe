"""A hostile member's job: looks for the server's secrets, the database, the data dir and
another user's run folder, tries to write the database, and prints what it got. Every line
that starts with LEAK is something it should not have reached; the test reads its output."""

import argparse
import os
import sqlite3

parser = argparse.ArgumentParser()
parser.add_argument("--database", required=True)
parser.add_argument("--data-dir", required=True)
parser.add_argument("--data-file", action="append", default=[])
parser.add_argument("--other-run", required=True)
args = parser.parse_args()

pids = [name for name in os.listdir("/proc") if name.isdigit()]
print(f"checked: visible pids {sorted(int(p) for p in pids)}", flush=True)
for pid in pids:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError as exc:
        print(f"checked: environ of {pid}: {exc.strerror}", flush=True)
        continue
    for name in (
        b"TORCHYARD_ADMIN_PASSWORD=",
        b"TORCHYARD_SECRET_KEY=",
        b"TORCHYARD_DATABASE_URL=",
    ):
        if name in environ:
            print(f"LEAK environ of pid {pid} has {name.decode()}", flush=True)

for path in [args.database, *args.data_file]:
    try:
        with open(path, "rb") as f:
            print(f"LEAK read {path}: {f.read(16)!r}", flush=True)
    except OSError as exc:
        print(f"checked: read {path}: {exc.strerror}", flush=True)

try:
    listing = sorted(os.listdir(args.data_dir))
    print(f"checked: data dir lists {listing}", flush=True)
except OSError as exc:
    print(f"checked: list data dir: {exc.strerror}", flush=True)

try:
    print(f"LEAK other run lists {sorted(os.listdir(args.other_run))}", flush=True)
except OSError as exc:
    print(f"checked: list other run: {exc.strerror}", flush=True)
try:
    with open(os.path.join(args.other_run, "output.log"), "rb") as f:
        print(f"LEAK other run's log: {f.read(40)!r}", flush=True)
except OSError as exc:
    print(f"checked: read other run's log: {exc.strerror}", flush=True)

try:
    db = sqlite3.connect(f"file:{args.database}?mode=rw", uri=True, timeout=2)
    db.execute("CREATE TABLE pwned (x INTEGER)")
    db.execute("UPDATE users SET role = 'admin'")
    db.commit()
    print("LEAK wrote the database", flush=True)
except sqlite3.Error as exc:
    print(f"checked: write the database: {exc}", flush=True)
print("snoop done", flush=True)
