"""Local destinations for notifications: an HTTP receiver (http.server in a thread) that can
answer 500 to its first requests, and an SMTP server (aiosmtpd). Both record what arrived."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.stack import free_port
from tests.waits import wait_for


@dataclass
class WebhookReceiver:
    url: str
    fail_first: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)  # every request, failed too
    bodies: list[dict[str, Any]] = field(default_factory=list)  # the ones answered 200

    def events(self) -> list[str]:
        return [str(b.get("event")) for b in self.bodies]


@contextmanager
def webhook_receiver(fail_first: int = 0) -> Iterator[WebhookReceiver]:
    port = free_port()
    receiver = WebhookReceiver(url=f"http://127.0.0.1:{port}/hook", fail_first=fail_first)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                receiver.requests.append(body)
                failing = len(receiver.requests) <= receiver.fail_first
                if not failing:
                    receiver.bodies.append(body)
            self.send_response(500 if failing else 200)
            self.end_headers()
            self.wfile.write(b"boom" if failing else b"ok")

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class SmtpReceiver:
    host: str
    port: int
    messages: list[Message] = field(default_factory=list)

    def subjects(self) -> list[str]:
        return [str(m["Subject"]) for m in self.messages]


@contextmanager
def smtp_receiver() -> Iterator[SmtpReceiver]:
    from aiosmtpd.controller import Controller

    receiver = SmtpReceiver(host="127.0.0.1", port=free_port())

    class Handler:
        async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:  # noqa: N802
            receiver.messages.append(message_from_bytes(envelope.content))
            return "250 OK"

    controller = Controller(Handler(), hostname=receiver.host, port=receiver.port)
    controller.start()
    try:
        yield receiver
    finally:
        controller.stop()


def wait_until(check: Callable[[], object], timeout: float = 30, what: str = "") -> None:
    wait_for(check, timeout=timeout, every=0.1, what=what or repr(check))
