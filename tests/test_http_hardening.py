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
