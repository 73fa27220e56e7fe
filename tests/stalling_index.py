"""A package index on this machine whose one wheel never finishes downloading: a worker whose
pip is pointed at it (``PIP_INDEX_URL``) builds a run's environment for as long as the test
likes, a real slow build to cancel (tests/test_liveness.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WHEEL_BYTES = 50_000_000  # what the wheel says it is; only its first KiB is ever sent


class StallingIndex:
    """The index's address, and whether pip has started the download (it is stuck there)."""

    def __init__(self, package: str) -> None:
        self.package = package
        self.wheel = f"{package.replace('-', '_')}-1.0-py3-none-any.whl"
        self.downloading = threading.Event()
        self.released = threading.Event()
        self.url = ""


def _handler(index: StallingIndex) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802  # http.server's name
            if self.path.rstrip("/") == f"/simple/{index.package}":
                page = f'<a href="/files/{index.wheel}">{index.wheel}</a>'.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)
            elif self.path == f"/files/{index.wheel}":
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(WHEEL_BYTES))
                self.end_headers()
                self.wfile.write(b"PK" + bytes(1022))
                self.wfile.flush()
                index.downloading.set()
                index.released.wait(timeout=600)  # until pip is killed, or the test ends
            else:
                self.send_error(404)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    return Handler


@contextmanager
def stalling_index(package: str) -> Iterator[StallingIndex]:
    index = StallingIndex(package)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(index))
    server.daemon_threads = True
    index.url = f"http://127.0.0.1:{server.server_address[1]}/simple"
    thread = threading.Thread(target=server.serve_forever, name="stalling-index", daemon=True)
    thread.start()
    try:
        yield index
    finally:
        index.released.set()
        server.shutdown()
        server.server_close()
