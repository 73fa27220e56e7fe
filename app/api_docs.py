"""/docs (Swagger UI) and /redoc (ReDoc) that work without internet.

FastAPI's built-in pages load their JavaScript and CSS from a CDN (and ReDoc its fonts from
Google), so on a box without internet the nav's "API" link was a blank page. These are the
same pages, from FastAPI's own HTML builders, pointed at the bundles served by
app/static_files.py; the app turns its built-in routes off (docs_url=None, redoc_url=None).
"""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi import APIRouter
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse

from app.security_headers import content_security_policy
from app.static_files import docs_asset_url

OPENAPI_URL = "/openapi.json"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"
FAVICON_URL = "/static/favicon.svg"
TITLE = "torchyard API"

router = APIRouter(include_in_schema=False)

_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def with_script_hashes(page: HTMLResponse) -> HTMLResponse:
    """The page with a CSP that lets exactly its own inline scripts run (by their SHA-256):
    FastAPI's docs pages start the viewers with an inline script, which the site-wide policy
    (app/security_headers.py) refuses; an injected script still does not run here."""
    body = bytes(page.body).decode()
    hashes = [
        "'sha256-" + base64.b64encode(hashlib.sha256(m.encode()).digest()).decode() + "'"
        for m in _INLINE_SCRIPT.findall(body)
    ]
    page.headers["Content-Security-Policy"] = content_security_policy(
        script_src=" ".join(["'self'", *hashes])
    )
    return page


@router.get("/docs")
def swagger_ui() -> HTMLResponse:
    return with_script_hashes(
        get_swagger_ui_html(
            openapi_url=OPENAPI_URL,
            title=TITLE,
            swagger_js_url=docs_asset_url("swagger-ui-bundle.js"),
            swagger_css_url=docs_asset_url("swagger-ui.css"),
            swagger_favicon_url=FAVICON_URL,
            oauth2_redirect_url=OAUTH2_REDIRECT_URL,
        )
    )


@router.get(OAUTH2_REDIRECT_URL)
def swagger_ui_oauth2_redirect() -> HTMLResponse:
    return with_script_hashes(get_swagger_ui_oauth2_redirect_html())


@router.get("/redoc")
def redoc() -> HTMLResponse:
    return with_script_hashes(
        get_redoc_html(
            openapi_url=OPENAPI_URL,
            title=TITLE,
            redoc_js_url=docs_asset_url("redoc.standalone.js"),
            redoc_favicon_url=FAVICON_URL,
            with_google_fonts=False,
        )
    )
