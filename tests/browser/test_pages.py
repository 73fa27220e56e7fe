"""The DOM contract of docs/ui.md on the pages that need no training run: login and logout,
the experiments list (search, pagination, empty state), the experiment page and its clone. (No
page wider than 390 px, and the menu reaching every link there: tests/browser/test_page_widths.py,
which visits the same pages with longer names and more params.)"""

from __future__ import annotations

import json
import secrets

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import log_in
from tests.conftest import make_user

pytestmark = [pytest.mark.slow, pytest.mark.browser]

PER_PAGE = 20  # app/experiments/views.py


def test_login_rejects_a_wrong_password_and_logout_ends_the_session(page: Page) -> None:
    page.goto("/")
    assert "/login" in page.url  # logged out: every page sends you to the form
    page.fill("#username", "admin")
    page.fill("#password", "not-the-password")
    page.click("form#login-form button[type=submit]")
    expect(page.locator(".form-error")).to_be_visible()
    assert "/login" in page.url

    username, password, _headers = make_user()
    log_in(page, username, password)
    page.click("button#logout")
    page.wait_for_url("**/login**")
    page.goto("/experiments/new")
    assert "/login" in page.url


def test_experiments_list_searches_by_name_paginates_and_says_when_empty(
    admin_page: Page, api: httpx.Client
) -> None:
    tag = f"pg{secrets.token_hex(3)}"
    config = {"recipe": "tiny_mlp", "params": {"epochs": 1}}
    ids = []
    for i in range(PER_PAGE + 1):
        r = api.post("/api/experiments", json={"name": f"{tag}-{i:02d}", "config": config})
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    page = admin_page
    page.goto("/")
    page.fill("input[name=q]", tag)
    page.press("input[name=q]", "Enter")
    page.wait_for_url(f"**q={tag}**")
    rows = page.locator("table#experiments tr[data-experiment-id]")
    expect(rows).to_have_count(PER_PAGE)
    shown = [int(x) for x in rows.evaluate_all("rs => rs.map((r) => r.dataset.experimentId)")]
    assert shown == sorted(ids, reverse=True)[:PER_PAGE]  # newest first
    page.click("a[rel=next]")
    expect(rows).to_have_count(1)
    assert rows.first.get_attribute("data-experiment-id") == str(ids[0])
    expect(page.locator("a[rel=prev]")).to_be_visible()
    assert page.locator("a[rel=next]").count() == 0

    page.goto(f"/?q={tag}-nothing")
    expect(page.locator(".empty")).to_be_visible()
    assert rows.count() == 0


def test_experiment_page_shows_config_and_clone_prefills_the_form(
    admin_page: Page, api: httpx.Client
) -> None:
    config = {
        "recipe": "tiny_mlp",
        "params": {"epochs": 2, "lr": 0.02, "steps_per_epoch": 7},
        "seed": 11,
    }
    exp = api.post("/api/experiments", json={"name": "browser-clone", "config": config}).json()
    page = admin_page
    page.goto(f"/experiments/{exp['id']}")
    shown = json.loads(page.locator("#experiment-config").inner_text())
    assert shown["params"]["lr"] == 0.02 and shown["seed"] == 11
    expect(page.locator("textarea#overrides")).to_be_visible()
    expect(page.locator("button#launch-run")).to_be_visible()

    page.click("a#clone-experiment")
    page.wait_for_url(f"**/experiments/new?from={exp['id']}")
    assert page.input_value("select[name=recipe]") == "tiny_mlp"
    assert float(page.input_value('[name="params.lr"]')) == 0.02
    assert int(page.input_value('[name="params.steps_per_epoch"]')) == 7
    assert int(page.input_value("[name=seed]")) == 11


def test_launch_with_bad_overrides_says_why_and_launches_nothing(
    admin_page: Page, api: httpx.Client
) -> None:
    config = {"recipe": "tiny_mlp", "params": {"epochs": 1}}
    exp = api.post("/api/experiments", json={"name": "browser-overrides", "config": config}).json()
    page = admin_page
    page.goto(f"/experiments/{exp['id']}")
    page.fill("textarea#overrides", '{"params": {"lr": -1}}')
    page.click("button#launch-run")
    expect(page.locator("#launch-form")).to_contain_text("lr", timeout=10_000)
    assert page.url.endswith(f"/experiments/{exp['id']}")
    assert api.get(f"/api/experiments/{exp['id']}/runs").json() == []


def _luminance(page: Page, selector: str, prop: str) -> float:
    """0 (black) to 1 (white): the computed colour's relative brightness."""
    rgb = page.eval_on_selector(selector, f"e => getComputedStyle(e).{prop}")
    r, g, b = (int(c) for c in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def test_pages_follow_the_systems_dark_mode(page: Page) -> None:
    """app.css takes its colours from the system's choice (prefers-color-scheme): dark
    surfaces with light text when it asks for dark, the light set otherwise."""
    username, password, _headers = make_user()
    page.emulate_media(color_scheme="dark")
    log_in(page, username, password)
    for selector in ("body", ".topbar"):
        assert _luminance(page, selector, "backgroundColor") < 0.2, selector
    assert _luminance(page, "body", "color") > 0.7
    page.emulate_media(color_scheme="light")
    for selector in ("body", ".topbar"):
        assert _luminance(page, selector, "backgroundColor") > 0.9, selector
    assert _luminance(page, "body", "color") < 0.3


def test_question_mark_lists_the_shortcuts_and_they_work(page: Page) -> None:
    username, password, _headers = make_user()
    log_in(page, username, password)  # lands on the experiments list
    page.keyboard.press("?")
    dialog = page.locator("dialog#shortcuts")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Go to GPUs")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    page.keyboard.press("/")
    expect(page.locator("#q")).to_be_focused()
    page.keyboard.type("gg")  # typed into the search box: the box's, not a shortcut
    assert page.input_value("#q") == "gg"
    page.locator("#q").blur()
    page.keyboard.press("g")
    page.keyboard.press("g")
    page.wait_for_url("**/gpus")
