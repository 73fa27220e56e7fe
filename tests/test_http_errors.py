"""app/http_errors.py: each domain error's status, headers and JSON body, decided once."""

from __future__ import annotations

import json

import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

from app.errors import (
    BadRequest,
    Conflict,
    DomainError,
    Forbidden,
    Invalid,
    NotFound,
    TooLarge,
    TooMany,
    Unauthorized,
    UnsupportedMedia,
    field_error,
)
from app.experiments.config.validate import ConfigInvalid
from app.http_errors import error_response, install_error_handlers, status_of


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (BadRequest("a malformed multipart body"), 400),
        (Unauthorized("token expired"), 401),
        (Forbidden("not yours"), 403),
        (NotFound.of("run", 12), 404),
        (Conflict("run 3 has already finished"), 409),
        (TooLarge("larger than max_code_bytes"), 413),
        (UnsupportedMedia("send multipart/form-data"), 415),
        (TooMany("slow down", retry_after=7), 429),
    ],
)
def test_each_error_answers_its_status_with_its_sentence(error: DomainError, code: int) -> None:
    response = error_response(error)
    assert response.status_code == code == status_of(error)
    assert json.loads(bytes(response.body)) == {"detail": error.detail}


def test_not_found_says_what_and_which() -> None:
    assert NotFound.of("run", 12).detail == "run 12 not found"


def test_unauthorized_asks_for_a_bearer_token_and_too_many_says_when_to_retry() -> None:
    assert error_response(Unauthorized("no")).headers["www-authenticate"] == "Bearer"
    assert error_response(TooMany("wait", retry_after=5)).headers["retry-after"] == "5"
    assert "retry-after" not in error_response(Conflict("busy")).headers


def test_invalid_is_fastapis_422_list_of_field_errors() -> None:
    error = Invalid(
        [
            field_error(["query", "rank"], "rank must be below 2", 3, kind="less_than"),
            field_error(["query", "after"], "not JSON", "{"),
        ]
    )
    response = error_response(error)
    assert response.status_code == 422
    assert json.loads(bytes(response.body)) == {
        "detail": [
            {
                "type": "less_than",
                "loc": ["query", "rank"],
                "msg": "rank must be below 2",
                "input": 3,
            },
            {"type": "value_error", "loc": ["query", "after"], "msg": "not JSON", "input": "{"},
        ]
    }
    # One line for a form's banner (the account and users pages show it).
    assert error.detail == "rank must be below 2; not JSON"


def test_a_config_refused_is_a_422_like_any_invalid_value() -> None:
    """ConfigInvalid maps here, once, instead of in each service that validates a config."""
    error = ConfigInvalid([field_error(["body", "config", "recipe"], "unknown recipe", "x")])
    assert status_of(error) == 422
    assert json.loads(bytes(error_response(error).body))["detail"][0]["loc"] == [
        "body",
        "config",
        "recipe",
    ]


def test_an_unmapped_domain_error_is_a_500_not_a_guessed_4xx() -> None:
    class Unmapped(DomainError):
        pass

    assert status_of(Unmapped("ours")) == 500


def test_errors_raised_in_routes_and_dependencies_reach_the_client_as_mapped() -> None:
    app = FastAPI()
    install_error_handlers(app)

    def refuse() -> None:
        raise Forbidden("viewers may read but not change anything")

    @app.get("/dep", dependencies=[Depends(refuse)])
    def from_dependency() -> None:
        return None

    @app.get("/route")
    def from_route() -> None:
        raise Invalid.at(["query", "since"], "since must be before until", "2026-01-02")

    client = TestClient(app)
    r = client.get("/dep")
    assert (r.status_code, r.json()) == (
        403,
        {"detail": "viewers may read but not change anything"},
    )
    r = client.get("/route")
    assert r.status_code == 422
    assert r.json()["detail"] == [
        {
            "type": "value_error",
            "loc": ["query", "since"],
            "msg": "since must be before until",
            "input": "2026-01-02",
        }
    ]
