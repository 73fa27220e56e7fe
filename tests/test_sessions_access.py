"""Who reaches a session's JupyterLab through /sessions/<id>/lab/... (app/sessions/access.py):
its owner and admins; not another member, a viewer or anyone signed out; a cookie's unsafe
request or WebSocket only from this server's own origin. The session here has no JupyterLab
up (no worker), so an allowed caller gets 409 "starting": tests/test_e2e_sessions.py shows
the allowed path end to end with a real one."""

from __future__ import annotations

import http.server
import socketserver
import threading

import pytest
from sqlalchemy import select
from starlette.websockets import WebSocketDisconnect

from app.auth.models import User
from app.db import session_scope
from app.sessions.proxy import answer_headers
from app.settings import get_settings
from tests.conftest import make_user
from tests.factories import add_run
from torchyard.contract import RunPaths

SESSION = {"session": {"hours": 1}, "seed": 1}


def _user_id(username: str) -> int:
    with session_scope() as session:
        found = session.scalar(select(User.id).where(User.username == username))
        assert found is not None
        return found


@pytest.fixture
def people() -> dict[str, tuple[int, dict[str, str]]]:
    found = {}
    for name, kind in (("owner", ""), ("other", ""), ("viewer", "viewer"), ("admin", "admin")):
        username, _pw, headers = make_user(admin=kind == "admin", role=kind if kind else "")
        found[name] = (_user_id(username), headers)
    return found


def _session_run(owner_id: int, status: str = "running", config: dict | None = None) -> int:
    with session_scope() as session:
        return add_run(session, owner_id=owner_id, config=config or SESSION, status=status)


def test_who_reaches_the_lab(client, people) -> None:
    run_id = _session_run(people["owner"][0])
    url = f"/sessions/{run_id}/lab/api/contents"
    assert client.get(url).status_code == 401
    assert client.get(url, headers=people["other"][1]).status_code == 403
    assert client.get(url, headers=people["viewer"][1]).status_code == 403
    for allowed in ("owner", "admin"):
        answer = client.get(url, headers=people[allowed][1])
        assert answer.status_code == 409, answer.text  # allowed; its JupyterLab is not up
        assert "not up yet" in answer.json()["detail"]


def test_an_admins_browser_is_kept_out_of_a_members_lab(client, people) -> None:
    """The lab's pages come from a process the member controls, on this server's origin: an
    admin's signed-in browser would run the member's script as the admin. The admin's token
    reaches it; the admin's cookie does not. The owner's cookie does."""
    run_id = _session_run(people["owner"][0])
    url = f"/sessions/{run_id}/lab/api/contents"
    for who, status in (("admin", 403), ("owner", 409)):
        token = people[who][1]["Authorization"].removeprefix("Bearer ")
        client.cookies.set("ty_session", token)
        try:
            answer = client.get(url)
            assert answer.status_code == status, (who, answer.text)
            assert who == "owner" or "with a token" in answer.json()["detail"]
        finally:
            client.cookies.clear()


def test_the_lab_sets_no_cookie_of_ours_and_no_wide_service_worker() -> None:
    got = answer_headers(
        [
            ("Content-Type", "text/html"),
            ("Set-Cookie", "_xsrf=2|abc; Path=/sessions/7/lab/"),
            ("Set-Cookie", "ty_session=someone-elses; Path=/; HttpOnly"),
            ("set-cookie", "anything=1; Path=/"),
            ("Service-Worker-Allowed", "/"),
            ("Transfer-Encoding", "chunked"),
        ]
    )
    assert got == [
        ("Content-Type", "text/html"),
        ("Set-Cookie", "_xsrf=2|abc; Path=/sessions/7/lab/"),
    ]


def test_not_a_session_or_not_running(client, people) -> None:
    owner_id, headers = people["owner"]
    plain = _session_run(owner_id, config={"recipe": "tiny_mlp", "seed": 1})
    assert client.get(f"/sessions/{plain}/lab/api", headers=headers).status_code == 404
    assert client.get("/sessions/999999999/lab/api", headers=headers).status_code == 404
    ended = _session_run(owner_id, status="cancelled")
    answer = client.get(f"/sessions/{ended}/lab/api", headers=headers)
    assert answer.status_code == 409 and "cancelled" in answer.json()["detail"]


def test_a_cookie_write_from_another_origin_is_refused(client, people) -> None:
    run_id = _session_run(people["owner"][0])
    token = people["owner"][1]["Authorization"].removeprefix("Bearer ")
    client.cookies.set("ty_session", token)
    try:
        url = f"/sessions/{run_id}/lab/api/kernels"
        evil = client.post(url, json={}, headers={"Origin": "http://evil.example"})
        assert evil.status_code == 403, evil.text
        own = client.post(url, json={}, headers={"Origin": "http://testserver"})
        assert own.status_code == 409, own.text  # past the origin check: not up yet
    finally:
        client.cookies.clear()


def test_the_websocket_is_refused_alike(client, people) -> None:
    run_id = _session_run(people["owner"][0])
    url = f"/sessions/{run_id}/lab/api/kernels/k/channels"
    for who, code in (("other", 4403), ("owner", 4409)):
        with pytest.raises(WebSocketDisconnect) as refused:
            with client.websocket_connect(url, headers=people[who][1]):
                pass
        assert refused.value.code == code


def test_a_link_in_the_sessions_folder_reaches_no_host_socket(client, people, tmp_path) -> None:
    """The session's folder is its job's. A lab.sock that is a link to another socket of the
    host (Docker's, as root, stood for here by a small HTTP server) must not be where the
    root server sends the member's requests: it was, and answered 200 with that server's
    body."""
    run_id = _session_run(people["owner"][0])
    paths = RunPaths(get_settings().run_dir(run_id))
    paths.session_socket.parent.mkdir(parents=True, exist_ok=True)
    paths.session_token.write_text("a" * 43)
    host_socket = tmp_path / "docker.sock"

    class Docker(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"the host's docker")

        def log_message(self, *args: object) -> None:
            pass

    server = socketserver.UnixStreamServer(str(host_socket), Docker)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        paths.session_socket.symlink_to(host_socket)
        answer = client.get(f"/sessions/{run_id}/lab/api/contents", headers=people["owner"][1])
        assert answer.status_code != 200 and "docker" not in answer.text, answer.text
    finally:
        server.shutdown()
        server.server_close()
