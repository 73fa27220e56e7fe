"""The notifications page in Chromium: reached from the account page, a refused webhook URL
and e-mail said next to their fields, the typed values kept; "Send test" with nothing saved
says so. docs/screenshots/notifications.png is the page with its errors."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.browser.conftest import SCREENSHOTS, log_in
from tests.conftest import make_user


def test_the_settings_page_shows_errors_next_to_fields_and_the_test_answer(page: Page) -> None:
    username, password, _ = make_user()
    log_in(page, username, password)
    page.goto("/account")
    with page.expect_navigation():
        page.click("#notifications-link")
    with page.expect_navigation():
        page.click("#send-test")
    expect(page.locator("#test-error")).to_contain_text("save a webhook URL or an e-mail")
    page.fill("#webhook-url", "http://169.254.169.254/latest/meta-data/")
    page.fill("#stalled-minutes", "0")
    with page.expect_navigation():
        page.click("#notifications-form button[type=submit]")
    expect(page.locator("#webhook-url-error")).to_contain_text("not a public address")
    expect(page.locator("#stalled-minutes-error")).to_contain_text("greater than or equal to 1")
    expect(page.locator("#webhook-url")).to_have_value("http://169.254.169.254/latest/meta-data/")
    expect(page.locator("#gpu-idle-minutes-error")).to_have_count(0)
    page.screenshot(path=str(SCREENSHOTS / "notifications.png"), full_page=True)
    page.fill("#webhook-url", "https://hooks.example.com/services/T0/B0/x")
    page.fill("#stalled-minutes", "20")
    page.uncheck("#events input[value=succeeded]")
    with page.expect_navigation():
        page.click("#notifications-form button[type=submit]")
    expect(page.locator("#notifications-notice")).to_contain_text("saved")
    expect(page.locator("#events input[value=succeeded]")).not_to_be_checked()
    expect(page.locator("#events input[value=failed]")).to_be_checked()
