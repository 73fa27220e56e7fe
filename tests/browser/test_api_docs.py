"""The nav's "API" link works on a box without internet: Swagger UI and ReDoc render the API
from the server's own files, with every request to another host refused.

Only ReDoc's "API docs by Redocly" badge still points at its maker's CDN: an image, which
then does not show; no script, style, font or data request leaves the box.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Page, Route, expect

from tests.stack import LiveStack

pytestmark = [pytest.mark.slow, pytest.mark.browser]


COSMETIC = {"image"}


@pytest.fixture
def offline_page(page: Page, live_stack: LiveStack) -> tuple[Page, list[str]]:
    """The tab with the internet cut off: requests to any other host fail, and those the
    page needs to work (everything but images) are listed."""
    ours = urlsplit(live_stack.base_url).netloc
    foreign: list[str] = []

    def only_ours(route: Route) -> None:
        if urlsplit(route.request.url).netloc == ours:
            route.continue_()
        else:
            if route.request.resource_type not in COSMETIC:
                foreign.append(f"{route.request.resource_type} {route.request.url}")
            route.abort("internetdisconnected")

    page.route("**/*", only_ours)
    return page, foreign


def test_swagger_ui_renders_the_api_offline(offline_page: tuple[Page, list[str]]) -> None:
    page, foreign = offline_page
    page.goto("/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("torchyard")
    expect(page.locator(".opblock-summary-path", has_text="/api/experiments").first).to_be_visible()
    assert not foreign, foreign


def test_redoc_renders_the_api_offline(offline_page: tuple[Page, list[str]]) -> None:
    page, foreign = offline_page
    page.goto("/redoc")
    expect(page.locator("h1", has_text="torchyard").first).to_be_visible()
    expect(page.get_by_text("/api/experiments").first).to_be_attached()
    assert not foreign, foreign
