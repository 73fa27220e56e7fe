"""Listens on every interface of its job's network and says where; exits when its run is
cancelled (tests/test_job_network.py: another run must not reach it)."""

import socket
import time

server = socket.create_server(("0.0.0.0", 0))
server.settimeout(0.5)
print(f"LISTENING {server.getsockname()[1]}", flush=True)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    try:
        peer, address = server.accept()
    except TimeoutError:
        continue
    print(f"ACCEPTED {address}", flush=True)
    peer.close()
