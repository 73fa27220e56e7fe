"""Notification settings through the API and the account page, in-process: what is refused
(and named), the test button against a local HTTP receiver and a local SMTP server, and the
deliveries log."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from app.settings import get_settings
from tests.conftest import make_user
from tests.notify_receivers import SmtpReceiver, smtp_receiver, webhook_receiver
from tests.test_pages import login
from tests.test_users_views import post_form

URL = "/api/users/me/notifications"


@pytest.fixture
def smtp(monkeypatch: pytest.MonkeyPatch) -> Iterator[SmtpReceiver]:
    """A local SMTP server as this box's, and 127.0.0.1 allowed for webhooks."""
    with smtp_receiver() as receiver:
        settings = get_settings()
        monkeypatch.setattr(settings, "smtp_host", receiver.host)
        monkeypatch.setattr(settings, "smtp_port", receiver.port)
        monkeypatch.setattr(settings, "smtp_from", "torchyard@test.invalid")
        monkeypatch.setattr(settings, "notify_webhook_allow_networks", "127.0.0.1/32")
        monkeypatch.setattr(settings, "notify_test_cooldown_seconds", 0.0)
        yield receiver


def field_errors(response) -> dict[str, str]:
    assert response.status_code == 422, response.text
    return {str(e["loc"][1]): e["msg"] for e in response.json()["detail"]}  # ["body", field, ..]


def test_settings_default_to_no_channel_and_every_event(client, user_headers) -> None:
    body = client.get(URL, headers=user_headers).json()
    assert body["webhook_url"] is None and body["email"] is None
    assert set(body["events"]) == {
        "succeeded", "failed", "cancelled", "non_finite", "stalled", "gpu_idle"
    }  # fmt: skip
    assert body["stalled_minutes"] == 30 and body["email_available"] is False


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://example.com/hook", "only http:// and https://"),
        ("file:///etc/passwd", "only http:// and https://"),
        ("javascript:alert(1)", "only http:// and https://"),
        ("gopher://127.0.0.1:6379/_FLUSHALL", "only http:// and https://"),
        ("https://user:pw@example.com/hook", "credentials"),
        ("https:///nohost", "no host"),
        ("https://example.com/a b", "spaces or control"),
        ("http://127.0.0.1:6379/", "not a public address"),
        ("http://localhost/hook", "not a public address"),
        ("http://169.254.169.254/latest/meta-data/", "not a public address"),
        ("http://[::ffff:10.0.0.1]/", "not a public address"),
        ("http://10.1.2.3/hook", "not a public address"),
        # loopback spelled as inet_aton/getaddrinfo take it: refused at save, not only at send
        ("http://2130706433/hook", "127.0.0.1 is not a public address"),
        ("http://0x7f000001/hook", "127.0.0.1 is not a public address"),
        ("http://0177.0.0.1/hook", "127.0.0.1 is not a public address"),
        ("http://127.1/hook", "127.0.0.1 is not a public address"),
        ("http://0/hook", "0.0.0.0 is not a public address"),
        ("http://0x0a.1/hook", "10.0.0.1 is not a public address"),
        ("http://localhost./hook", "not a public address"),
        ("http://api.localhost/hook", "not a public address"),
    ],
)
def test_a_webhook_url_that_is_not_public_http_is_a_422_naming_it(
    client, user_headers, url: str, says: str
) -> None:
    errors = field_errors(client.put(URL, headers=user_headers, json={"webhook_url": url}))
    assert says in errors["webhook_url"], errors


def test_bad_values_are_422s_naming_their_fields(client, user_headers) -> None:
    errors = field_errors(
        client.put(
            URL,
            headers=user_headers,
            json={"stalled_minutes": 0, "gpu_idle_minutes": "NaN", "events": ["sometimes"]},
        )
    )
    assert errors.keys() == {"stalled_minutes", "gpu_idle_minutes", "events"}, errors
    # An e-mail address on a server without SMTP: refused, saying why.
    errors = field_errors(client.put(URL, headers=user_headers, json={"email": "me@example.com"}))
    assert "cannot send e-mail" in errors["email"]
    errors = field_errors(client.put(URL, headers=user_headers, json={"nope": 1}))
    assert "nope" in errors
    # A boolean is not a number of minutes (pydantic's lax mode took `true` for 1.0; the fuzz
    # of test_api_schema found it).
    errors = field_errors(
        client.put(
            URL, headers=user_headers, json={"stalled_minutes": True, "gpu_idle_minutes": False}
        )
    )
    assert errors.keys() == {"stalled_minutes", "gpu_idle_minutes"}, errors


def test_email_header_injection_is_refused(client, user_headers, smtp) -> None:
    for address in ("me@example.com\r\nBcc: all@example.com", "a@b>, c@d", "no-at-sign"):
        errors = field_errors(client.put(URL, headers=user_headers, json={"email": address}))
        assert "e-mail address" in errors["email"] or "control" in errors["email"], errors


def test_saved_settings_read_back_and_stay_the_users_own(client, smtp) -> None:
    mine, theirs = make_user()[2], make_user()[2]
    saved = client.put(
        URL,
        headers=mine,
        json={"email": "me@example.com", "events": ["failed", "failed"], "stalled_minutes": 5},
    )
    assert saved.status_code == 200, saved.text
    assert saved.json()["events"] == ["failed"] and saved.json()["email_available"] is True
    assert client.get(URL, headers=mine).json()["email"] == "me@example.com"
    assert client.get(URL, headers=theirs).json()["email"] is None


def test_the_test_button_sends_to_each_channel_and_says_what_happened(client, smtp) -> None:
    headers = make_user()[2]
    assert client.post(f"{URL}/test", headers=headers).status_code == 409  # nothing to test
    with webhook_receiver() as hook:
        client.put(URL, headers=headers, json={"webhook_url": hook.url, "email": "me@example.com"})
        r = client.post(f"{URL}/test", headers=headers)
        assert r.status_code == 200, r.text
        results = {x["channel"]: x for x in r.json()["results"]}
        assert results["webhook"]["ok"] and results["webhook"]["detail"] == "HTTP 200"
        assert results["email"]["ok"], results
        assert hook.bodies and "test notification" in hook.bodies[0]["text"]
        assert hook.bodies[0]["event"] == "test"
    assert smtp.messages[-1]["To"] == "me@example.com"
    assert smtp.subjects()[-1] == "[torchyard] test notification"
    log = client.get(f"{URL}/deliveries", headers=headers).json()
    assert {(d["channel"], d["status"], d["attempts"]) for d in log} == {
        ("webhook", "delivered", 1),
        ("email", "delivered", 1),
    }


def test_a_failing_test_says_why_and_tests_are_rate_limited(client, smtp, monkeypatch) -> None:
    headers = make_user()[2]
    with webhook_receiver(fail_first=1) as hook:
        client.put(URL, headers=headers, json={"webhook_url": hook.url})
        r = client.post(f"{URL}/test", headers=headers)
    [result] = r.json()["results"]
    assert not result["ok"] and result["detail"] == "HTTP 500: boom"
    monkeypatch.setattr(get_settings(), "notify_test_cooldown_seconds", 60.0)
    again = client.post(f"{URL}/test", headers=headers)
    assert again.status_code == 429 and int(again.headers["Retry-After"]) > 0, again.text


def test_the_page_shows_errors_next_to_fields_and_keeps_what_was_typed(client, smtp) -> None:
    username, password, _ = make_user()
    login(client, username, password)
    assert 'id="notifications-link"' in client.get("/account").text
    page = client.get("/account/notifications")
    assert page.status_code == 200 and 'id="notifications-form"' in page.text
    r = post_form(
        client,
        "/account/notifications",
        webhook_url="ftp://example.com/x",
        email="not an address",
        stalled_minutes="zero",
        gpu_idle_minutes="10",
    )
    assert r.status_code == 422
    for field in ("webhook-url-error", "email-error", "stalled-minutes-error"):
        assert f'id="{field}"' in r.text, field
    assert "only http:// and https://" in r.text
    assert 'value="ftp://example.com/x"' in r.text and 'value="not an address"' in r.text
    assert 'id="gpu-idle-minutes-error"' not in r.text


def test_the_page_saves_and_its_send_test_button_shows_the_result(client, smtp) -> None:
    username, password, _ = make_user()
    login(client, username, password)
    with webhook_receiver() as hook:
        saved = client.post(
            "/account/notifications",
            data={
                "csrf_token": client.cookies["ty_csrf"],
                "webhook_url": hook.url,
                "email": "",
                "events": ["failed", "stalled"],
                "stalled_minutes": "15",
                "gpu_idle_minutes": "30",
            },
        )
        assert saved.status_code == 200 and 'id="notifications-notice"' in saved.text
        assert re.search(r'value="stalled" checked', saved.text)
        assert not re.search(r'value="succeeded" checked', saved.text)
        tested = post_form(client, "/account/notifications/test")
    assert tested.status_code == 200 and 'id="test-results"' in tested.text
    assert 'data-channel="webhook"' in tested.text and "sent" in tested.text
    assert len(hook.bodies) == 1
    assert "<td>test</td>" in client.get("/account/notifications").text  # in the log
