"""A session on the pages: the GPU page's "New session" form (members, not viewers), and the
run page's link to its JupyterLab for its owner while it runs (not for another member)."""

from __future__ import annotations

from sqlalchemy import select

from app.auth.models import User
from app.db import session_scope
from tests.conftest import make_user
from tests.factories import add_run


def _login(client, headers: dict[str, str]) -> None:
    client.cookies.clear()
    client.cookies.set("ty_session", headers["Authorization"].removeprefix("Bearer "))


def test_the_gpu_page_offers_a_new_session(client) -> None:
    _u, _p, member = make_user()
    _v, _p2, viewer = make_user(role="viewer")
    _login(client, member)
    page = client.get("/gpus")
    assert page.status_code == 200 and 'id="new-session"' in page.text
    assert "/static/session_form.js" in page.text
    _login(client, viewer)
    assert 'id="new-session"' not in client.get("/gpus").text
    client.cookies.clear()


def test_the_run_page_links_to_the_lab(client) -> None:
    owner_name, _p, owner = make_user()
    _o, _p2, other = make_user()
    with session_scope() as session:
        owner_id = session.scalar(select(User.id).where(User.username == owner_name))
        assert owner_id is not None
        config = {"session": {"hours": 2}, "seed": 1}
        run_id = add_run(session, owner_id=owner_id, config=config, status="running")
    _login(client, owner)
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    assert f'href="/sessions/{run_id}/lab/"' in page.text and "2 h limit" in page.text
    _login(client, other)
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200 and f"/sessions/{run_id}/lab/" not in page.text
    client.cookies.clear()
