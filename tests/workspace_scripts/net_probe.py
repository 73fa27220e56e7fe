"""Tries TCP connections to host:port pairs given as arguments and prints one line each:
`REACHED host:port` or `FAILED host:port <why>` (tests/test_job_network.py). Also says
whether its own loopback works and which interfaces and default route its network has."""

import socket
import sys

for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
    except OSError as exc:
        print(f"FAILED {target} {exc}", flush=True)
    else:
        print(f"REACHED {target}", flush=True)

own = socket.create_server(("127.0.0.1", 0))
socket.create_connection(own.getsockname(), timeout=3).close()
print("OWN LOOPBACK OK", flush=True)
with open("/proc/net/dev") as dev:
    names = sorted(line.split(":")[0].strip() for line in dev.readlines()[2:])
print(f"INTERFACES {','.join(names)}", flush=True)
with open("/proc/net/route") as routes:
    default = [line.split()[0] for line in routes.readlines()[1:] if line.split()[1] == "00000000"]
print(f"DEFAULT ROUTE {','.join(default) or 'none'}", flush=True)
