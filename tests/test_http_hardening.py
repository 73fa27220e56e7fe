"""Every response carries the security headers; oversized bodies are refused with 413."""

from __future__ import annotations


def test_api_and_pages_carry_security_headers(client, user_headers) -> None:
    for response in (
        client.get("/api/health"),
        client.get("/api/experiments", headers=user_headers),
        client.get("/login"),
    ):
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["referrer-policy"] == "same-origin"


def test_a_request_body_over_the_limit_is_413_and_stores_nothing(client, user_headers) -> None:
    from app.settings import get_settings

    before = client.get("/api/experiments", headers=user_headers).json()
    big = {
        "name": "x",
        "description": "a" * (get_settings().max_body_bytes + 1),
        "config": {"recipe": "tiny_mlp"},
    }
    r = client.post("/api/experiments", json=big, headers=user_headers)
    assert r.status_code == 413
    assert client.get("/api/experiments", headers=user_headers).json() == before


def test_a_normal_body_is_accepted(client, user_headers) -> None:
    r = client.post(
        "/api/experiments",
        json={"name": "ok", "config": {"recipe": "tiny_mlp"}},
        headers=user_headers,
    )
    assert r.status_code == 201


def test_an_unknown_query_parameter_on_the_api_is_a_422_naming_what_the_route_takes(
    client, user_headers
) -> None:
    r = client.get("/api/runs", params={"max_point": 10}, headers=user_headers)
    assert r.status_code == 422, r.text
    (error,) = r.json()["detail"]
    assert error["loc"] == ["query", "max_point"] and "unknown query parameter" in error["msg"]
    ok = client.get("/api/gpus", headers=user_headers)
    assert ok.status_code == 200
    typo = client.get("/api/usage", params={"sinse": "2026-01-01T00:00:00Z"}, headers=user_headers)
    assert typo.status_code == 422 and "since" in typo.json()["detail"][0]["msg"]


def test_pages_forbid_inline_script_and_api_answers_are_not_stored(client, user_headers) -> None:
    page = client.get("/login")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self';" in policy and "unsafe-inline" not in policy.split("style-src")[0]
    assert "frame-ancestors 'none'" in policy and "object-src 'none'" in policy
    assert "<script>" not in page.text
    for path in ("/api/me", "/api/experiments", "/api/health"):
        assert client.get(path, headers=user_headers).headers["cache-control"] == "no-store"
    assert client.get("/api/me").headers["cache-control"] == "no-store"  # a 401 too
    # the API docs allow exactly their own inline scripts, by hash
    docs = client.get("/docs").headers["content-security-policy"]
    assert "'sha256-" in docs and "unsafe-inline" not in docs.split("style-src")[0]


def test_no_template_has_an_inline_script_or_event_handler() -> None:
    """Data for a page's script may travel in a `<script type="application/json">` block (not
    run; its content through `tojson`, which escapes `<`, `>` and `&`); nothing else inline."""
    import re
    from pathlib import Path

    templates = Path(__file__).resolve().parent.parent / "templates"
    for path in templates.glob("*.html"):
        text = path.read_text()
        for data in re.finditer(r'<script type="application/json"[^>]*>(.*?)</script>', text, re.S):
            assert re.fullmatch(r"\s*\{\{[^}]*\|\s*tojson\s*\}\}\s*", data.group(1)), path.name
        text = re.sub(r'<script type="application/json"[^>]*>', "", text)
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text), path.name
        assert not re.search(r"\son[a-z]+\s*=", text), path.name


def test_with_tls_the_cookies_are_secure_and_host_prefixed(app, monkeypatch) -> None:
    from fastapi.testclient import TestClient

    from app.settings import get_settings
    from tests.conftest import make_user

    monkeypatch.setattr(get_settings(), "tls", True)
    username, password, _ = make_user()
    with TestClient(app, base_url="https://testserver", client=("10.55.0.1", 1)) as c:
        r = c.post(
            "/login", data={"username": username, "password": password}, follow_redirects=False
        )
        assert r.status_code == 303
        cookies = r.headers.get_list("set-cookie")
        assert len(cookies) == 2
        for cookie in cookies:
            assert cookie.startswith("__Host-ty_") and "Secure" in cookie and "Path=/" in cookie
            assert "Domain" not in cookie
        # and the session works under its new name
        page = c.get("/account")
        assert page.status_code == 200 and username in page.text
