"""Response compression (app/compression.py): gzip for a client across a network, none for one
on this machine unless a forwarding header or a configured proxy says it is a proxy's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from app.compression import NetworkGZipMiddleware
from tests.mlflow_server import serving

BIG = "x" * 5000


@pytest.fixture(scope="module")
def server(app: Any) -> Iterator[str]:
    with serving(app) as url:
        yield url


def _big(_request: Request) -> PlainTextResponse:
    return PlainTextResponse(BIG)


def _wrapped(*, behind_proxy: bool) -> NetworkGZipMiddleware:
    inner = Starlette(routes=[Route("/big", _big)])
    return NetworkGZipMiddleware(
        inner, minimum_size=1024, compresslevel=1, behind_proxy=behind_proxy
    )


@pytest.mark.parametrize(
    ("peer", "headers", "behind_proxy", "gzipped"),
    [
        ("127.0.0.1", {}, False, False),
        ("::1", {}, False, False),
        ("127.0.0.1", {"X-Forwarded-For": "198.51.100.4"}, False, True),
        ("127.0.0.1", {"Forwarded": "for=198.51.100.4"}, False, True),
        ("127.0.0.1", {"Via": "1.1 proxy"}, False, True),
        ("127.0.0.1", {}, True, True),
        ("203.0.113.7", {}, False, True),
        ("testclient", {}, False, True),
    ],
)
def test_only_a_client_on_this_machine_gets_bodies_uncompressed(
    peer: str, headers: dict[str, str], behind_proxy: bool, gzipped: bool
) -> None:
    client = TestClient(_wrapped(behind_proxy=behind_proxy), client=(peer, 50000))
    r = client.get("/big", headers=headers | {"Accept-Encoding": "gzip"})
    assert r.text == BIG
    assert (r.headers.get("content-encoding") == "gzip") is gzipped


def test_the_app_over_loopback_sends_raw_bytes_and_gzip_when_forwarded(server: str) -> None:
    """The real app behind uvicorn: the same file raw to a local client, gzipped to one that a
    proxy on this machine forwards."""
    url = f"{server}/static/app.css"
    raw = httpx.get(url, headers={"Accept-Encoding": "gzip"})
    assert "content-encoding" not in raw.headers
    assert int(raw.headers["content-length"]) == len(raw.content) > 1024
    proxied = httpx.get(url, headers={"Accept-Encoding": "gzip", "X-Forwarded-For": "198.51.100.4"})
    assert proxied.headers["content-encoding"] == "gzip"
    assert proxied.content == raw.content
