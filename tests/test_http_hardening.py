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
