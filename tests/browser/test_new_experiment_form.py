"""The new-experiment form shows the API's validation error next to the field and creates
nothing."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import Page, expect

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def server_message(api: httpx.Client, params: dict, field: str) -> str:
    """What the API itself says about this config (it creates nothing either: 422)."""
    r = api.post(
        "/api/experiments",
        json={"name": "probe", "config": {"recipe": "tiny_mlp", "params": params}},
    )
    assert r.status_code == 422, r.text
    for error in r.json()["detail"]:
        loc = [str(part) for part in error["loc"] if part not in ("body", "config")]
        if ".".join(loc) == field:
            return str(error["msg"])
    raise AssertionError(f"no error for {field}: {r.text}")


@pytest.mark.parametrize(
    ("field", "value"),
    [("params.lr", "-1"), ("params.epochs", "0")],
)
def test_invalid_param_shows_the_server_message_next_to_the_field_and_creates_nothing(
    admin_page: Page, api: httpx.Client, field: str, value: str
) -> None:
    name = field.split(".", 1)[1]
    expected = server_message(api, {name: float(value) if name == "lr" else int(value)}, field)
    before = len(api.get("/api/experiments").json())
    runs_before = len(api.get("/api/runs").json())

    page = admin_page
    page.goto("/experiments/new")
    page.fill("input[name=name]", f"browser-invalid-{name}")
    page.select_option("select[name=recipe]", "tiny_mlp")
    page.fill(f'[name="{field}"]', value)
    page.click("#create-and-launch")

    error = page.locator(f'.field-error[data-field="{field}"]')
    expect(error).to_be_visible(timeout=10_000)
    expect(error).to_contain_text(expected)
    assert page.url.endswith("/experiments/new"), page.url
    # Only that field is flagged, and the user's input is still there to fix.
    flagged = page.eval_on_selector_all(
        ".field-error",
        "els => els.filter((e) => e.textContent.trim()).map((e) => e.dataset.field)",
    )
    assert flagged == [field], flagged
    assert page.input_value(f'[name="{field}"]') == value
    assert len(api.get("/api/experiments").json()) == before
    assert len(api.get("/api/runs").json()) == runs_before
