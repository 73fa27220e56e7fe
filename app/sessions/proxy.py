"""``/sessions/<id>/lab/...``: the one way to a session's JupyterLab. HTTP is forwarded with
httpx over the session's unix socket, WebSockets (kernels, terminals) with `websockets`; both
after app.sessions.access said who may (its owner, admins). The caller's torchyard cookie and
token never reach Jupyter: the proxy sends the session's own secret instead."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, unix_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.typing import Subprotocol

from app.errors import Conflict, DomainError, Forbidden, NotFound, Unauthorized
from app.runs.files.job_files import job_socket
from app.sessions.access import authorize

router = APIRouter(include_in_schema=False)

LAB_PATH = "/sessions/{run_id}/lab/{path:path}"
# Hop-by-hop headers (RFC 9110 7.6.1) and the caller's credentials: not forwarded.
DROPPED = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "host",
        "authorization",
        "cookie",
        "origin",
        "content-length",
    }
)
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
# WebSocket close codes for a refusal before the handshake is accepted.
CLOSE_CODES: dict[type[DomainError], int] = {
    Unauthorized: 4401,
    Forbidden: 4403,
    NotFound: 4404,
    Conflict: 4409,
}


def _upstream_path(raw_path: str, query: str) -> str:
    return raw_path + (f"?{query}" if query else "")


def _cookies_without_ours(header: str) -> str:
    """Jupyter's own cookies (its _xsrf) go on; torchyard's session and CSRF cookies never."""
    kept = [p for p in header.split(";") if not p.strip().lower().startswith(("ty_", "__host-ty_"))]
    return ";".join(kept).strip()


@router.api_route(LAB_PATH, methods=METHODS)
async def lab_http(run_id: int, path: str, request: Request) -> StreamingResponse:
    del path  # the whole request path goes on: Jupyter's base_url is the proxy's
    import httpx  # on the first request only: app/sessions/end_rules.py says why

    lab = await run_in_threadpool(authorize, request, run_id, request.method)
    headers = {k: v for k, v in request.headers.items() if k.lower() not in DROPPED}
    headers["authorization"] = f"token {lab.token}"
    headers["accept-encoding"] = "identity"
    if cookies := _cookies_without_ours(request.headers.get("cookie", "")):
        headers["cookie"] = cookies
    body = await request.body()
    try:
        with job_socket(lab.socket) as address:  # connected, it may go (the address was it)
            client = httpx.AsyncClient(
                transport=httpx.AsyncHTTPTransport(uds=address),
                base_url="http://session",
                timeout=httpx.Timeout(60.0, connect=5.0),
            )
            upstream = client.build_request(
                request.method,
                _upstream_path(request.url.path, request.url.query),
                headers=headers,
                content=body,
            )
            try:
                response = await client.send(upstream, stream=True)
            except httpx.TransportError:
                await client.aclose()
                raise
    except (httpx.TransportError, OSError) as exc:
        return StreamingResponse(
            iter([f"the session's JupyterLab did not answer: {exc}".encode()]),
            status_code=502,
            media_type="text/plain",
        )

    async def body_of() -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_raw():
                yield chunk
        finally:
            await response.aclose()
            await client.aclose()

    out = StreamingResponse(body_of(), status_code=response.status_code)
    kept = answer_headers(response.headers.multi_items())
    out.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in kept]
    return out


def answer_headers(items: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The lab's answer headers that reach the browser. The lab is a process its member
    controls, answering on this server's origin: it may set no cookie but Jupyter's own
    `_xsrf` (a `ty_session` of its choosing would sign the browser in as someone else) and may
    not widen a service worker's scope beyond its path (`Service-Worker-Allowed: /` would let
    its worker serve every torchyard page)."""
    kept = []
    for key, value in items:
        name = key.lower()
        if name in DROPPED - {"cookie"} or name == "service-worker-allowed":
            continue
        if name == "set-cookie" and not value.lstrip().startswith("_xsrf="):
            continue
        kept.append((key, value))
    return kept


@router.websocket(LAB_PATH)
async def lab_ws(websocket: WebSocket, run_id: int, path: str) -> None:
    del path
    try:
        lab = await run_in_threadpool(authorize, websocket, run_id, "WEBSOCKET")
    except DomainError as exc:
        await websocket.close(code=CLOSE_CODES.get(type(exc), 4400), reason=str(exc)[:120])
        return
    offered = [Subprotocol(p) for p in websocket.scope.get("subprotocols", [])]
    uri = "ws://session" + _upstream_path(websocket.url.path, websocket.url.query)
    try:
        with job_socket(lab.socket) as address:
            upstream = await unix_connect(
                address,
                uri,
                additional_headers={"Authorization": f"token {lab.token}"},
                subprotocols=offered or None,
                max_size=None,
                open_timeout=10,
            )
    except (OSError, InvalidHandshake, TimeoutError) as exc:
        await websocket.close(code=1011, reason=f"JupyterLab refused: {exc}"[:120])
        return
    async with upstream:
        await websocket.accept(subprotocol=upstream.subprotocol)
        await _pump(websocket, upstream)


async def _pump(websocket: WebSocket, upstream: ClientConnection) -> None:
    """Both directions until either side closes."""

    async def down() -> None:
        with contextlib.suppress(ConnectionClosed):
            async for message in upstream:
                if isinstance(message, str):
                    await websocket.send_text(message)
                else:
                    await websocket.send_bytes(message)

    async def up() -> None:
        with contextlib.suppress(WebSocketDisconnect, ConnectionClosed):
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                if message.get("text") is not None:
                    await upstream.send(message["text"])
                elif message.get("bytes") is not None:
                    await upstream.send(message["bytes"])

    tasks = [asyncio.create_task(down()), asyncio.create_task(up())]
    _done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await upstream.close()
    with contextlib.suppress(RuntimeError):
        await websocket.close()
