"""Hostile request bodies get a 4xx with a JSON body that says what is wrong, never a 500;
names are bounded (1-200 characters) and any unicode within the bound is kept intact."""

from __future__ import annotations

import pytest

TINY = {"recipe": "tiny_mlp"}


def _post(client, headers, body: bytes, content_type: str = "application/json"):
    return client.post(
        "/api/experiments", content=body, headers={**headers, "Content-Type": content_type}
    )


def test_a_10k_character_name_is_422_naming_the_limit(client, user_headers) -> None:
    r = client.post(
        "/api/experiments", json={"name": "n" * 10_000, "config": TINY}, headers=user_headers
    )
    assert r.status_code == 422
    error = r.json()["detail"][0]
    assert error["loc"] == ["body", "name"] and "200" in error["msg"]


@pytest.mark.parametrize(
    "name",
    [
        "résumé — ünïcödé",
        "🔥🚀 run 🧪",
        "تجربة التعلم",  # Arabic (RTL)
        "\u202eevil\u202c mixed RTL override",
        "日本語の実験",
        "x" * 200,
        "🔥" * 200,
    ],
)
def test_unicode_names_are_stored_and_returned_intact(client, user_headers, name) -> None:
    r = client.post("/api/experiments", json={"name": name, "config": TINY}, headers=user_headers)
    assert r.status_code == 201, r.text
    got = client.get(f"/api/experiments/{r.json()['id']}", headers=user_headers).json()
    assert got["name"] == name


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"name": "x", "config": ', "JSON decode error"),
        (b"not json at all", "JSON decode error"),
        (b'{"name": "x", "config": {"recipe": "tiny_mlp", "seed": NaN}}', "NaN"),
        (b'{"name": "x", "config": {"recipe": "tiny_mlp", "params": {"lr": Infinity}}}', "Inf"),
        (b'{"name": "x", "config": {"recipe": "tiny_mlp"}, "description": -Infinity}', "Inf"),
        (b'{"name": "x", "config": ' + b'{"a": ' * 5000 + b"1" + b"}" * 5001, "nested"),
        (b"[" * 100_000 + b"]" * 100_000, "nested"),
        (b'{"name": "a\\u0000b", "config": {"recipe": "tiny_mlp"}}', "NUL"),
        # a lone surrogate: valid JSON text, no UTF-8 for it (was a 500), in a value or a key
        (b'{"name": "\\ud800", "config": {"recipe": "tiny_mlp"}}', "surrogate"),
        (b'{"name": "x", "config": {"recipe": "tiny_mlp", "params": {"\\udfff": 1}}}', "surrogate"),
        # 1e400 parses to infinity (was stored, and passed to the job as --y=inf)
        (b'{"name": "x", "config": {"recipe": "tiny_mlp", "params": {"y": 1e400}}}', "1e400"),
        (b'{"name": "x", "config": {"recipe": "tiny_mlp", "params": {"y": -2E+999}}}', "finite"),
        (b'{"name": "x", "config": {"recipe": "tiny_mlp"}', "JSON decode error"),
        (b"[]", "valid dictionary"),
        (b'"a string"', "valid dictionary"),
        (b"null", "valid dictionary"),
    ],
)
def test_bad_json_is_a_4xx_that_says_why(client, user_headers, body, says) -> None:
    before = client.get("/api/experiments", headers=user_headers).json()
    r = _post(client, user_headers, body)
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:200])
    assert r.headers["content-type"].startswith("application/json")
    assert says in r.text, r.text[:300]
    assert client.get("/api/experiments", headers=user_headers).json() == before


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", ""])
def test_a_wrong_content_type_is_422(client, user_headers, content_type) -> None:
    r = _post(
        client, user_headers, b'{"name": "x", "config": {"recipe": "tiny_mlp"}}', content_type
    )
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["detail"][0]["loc"] == ["body"]


def test_not_utf8_is_a_4xx(client, user_headers) -> None:
    r = _post(client, user_headers, '{"name": "é", "config": {}}'.encode("latin-1"))
    assert 400 <= r.status_code < 500 and r.json()["detail"]


@pytest.mark.parametrize(
    "path",
    [
        "/api/runs/99999999999999999999999",
        "/api/experiments/99999999999999999999999",
        "/api/runs/-5/logs",
        "/api/runs/abc",
        # Past PostgreSQL's 32-bit INTEGER keys (the database would refuse the query).
        "/api/runs/2147483648",
        "/api/experiments/2147483648/runs",
        "/api/runs/9223372036854775807/checkpoints",
    ],
)
def test_absurd_ids_are_404_or_422(client, user_headers, path) -> None:
    r = client.get(path, headers=user_headers)
    assert r.status_code in (404, 422) and r.json()["detail"]


def test_revoking_a_token_id_past_32_bits_is_404(client, user_headers) -> None:
    r = client.delete("/api/tokens/2147483648", headers=user_headers)
    assert r.status_code == 404 and r.json()["detail"]


def test_nan_in_run_overrides_is_refused(client, user_headers) -> None:
    exp = client.post(
        "/api/experiments", json={"name": "n", "config": TINY}, headers=user_headers
    ).json()
    r = client.post(
        f"/api/experiments/{exp['id']}/runs",
        content=b'{"overrides": {"params": {"lr": NaN}}}',
        headers={**user_headers, "Content-Type": "application/json"},
    )
    assert r.status_code == 422 and "NaN" in r.text


def test_a_surrogate_or_1e400_in_run_overrides_is_refused(client, user_headers) -> None:
    exp = client.post(
        "/api/experiments", json={"name": "n", "config": TINY}, headers=user_headers
    ).json()
    for body in (
        b'{"overrides": {"params": {"lr": 1e400}}}',
        b'{"overrides": {"params": {"note": "\\ud83d"}}}',
    ):
        r = client.post(
            f"/api/experiments/{exp['id']}/runs",
            content=body,
            headers={**user_headers, "Content-Type": "application/json"},
        )
        assert r.status_code == 422, r.text


@pytest.mark.parametrize(
    "path", ["/?page=12345678901234567890", "/compare?runs=12345678901234567890"]
)
def test_absurd_page_numbers_and_run_ids_on_pages_are_4xx(client, user_headers, path) -> None:
    client.cookies.set("ty_session", user_headers["Authorization"].removeprefix("Bearer "))
    try:
        r = client.get(path)
    finally:
        client.cookies.clear()
    assert r.status_code == 422, r.text[:300]
    assert "go up to" in r.text
