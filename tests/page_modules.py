"""What a page's HTML preloads: every ES module it runs, named up front so that a fresh
browser fetches them at once (app/static_files.py module_preloads)."""

from __future__ import annotations

import re


def assert_modules_preloaded(page: str, deepest: tuple[str, ...]) -> None:
    """`deepest` (the ends of the page's longest import chains) and every module script of the
    page are preloaded (common.js, on every page, loads on its own)."""
    preloaded = set(re.findall(r'<link rel="modulepreload" href="([^"]+)">', page))
    for url in deepest:
        assert url in preloaded, url
    for src in re.findall(r'<script type="module"[^>]* src="([^"]+)"', page):
        assert src in preloaded or src == "/static/common.js", src
