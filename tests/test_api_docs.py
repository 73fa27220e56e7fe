"""/docs and /redoc work without internet: every URL the pages load is ours and answers."""

from __future__ import annotations

import re

import pytest

from app.static_files import DOCS

# src="..." and href="..." in the HTML, and the `url: '...'` Swagger UI fetches the schema from.
URL = re.compile(r"""(?:src|href)="([^"]+)"|url: '([^']+)'|spec-url="([^"]+)\"""")


def referenced_urls(html: str) -> list[str]:
    return [next(g for g in m.groups() if g) for m in URL.finditer(html)]


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_api_docs_load_only_local_urls_and_each_answers(client, page: str) -> None:
    r = client.get(page)
    assert r.status_code == 200
    urls = referenced_urls(r.text)
    assert "/openapi.json" in urls and any(u.endswith(".js") for u in urls), urls
    assert "http://" not in r.text and "https://" not in r.text  # no CDN, no web fonts
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), f"{page} loads {url} from afar"
        got = client.get(url)
        assert got.status_code == 200, (url, got.status_code)
        assert got.content, url


def test_docs_assets_are_the_bundles_and_cached_for_good(client) -> None:
    html = client.get("/docs").text + client.get("/redoc").text
    for name, (_file, media_type) in DOCS.files.items():
        url = next(u for u in referenced_urls(html) if u.endswith("/" + name))
        r = client.get(url)
        assert r.headers["content-type"].startswith(media_type)
        assert "immutable" in r.headers["cache-control"]
        assert len(r.content) > 100_000  # the real bundle, not a stub


def test_an_unknown_docs_asset_is_a_404(client) -> None:
    url = next(u for u in referenced_urls(client.get("/docs").text) if u.endswith(".css"))
    for bad in ("settings.py", "..%2f__init__.py", "favicon.png"):
        r = client.get(url.rsplit("/", 1)[0] + "/" + bad)
        assert r.status_code == 404, bad
