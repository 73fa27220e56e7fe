"""/docs (Swagger UI) and /redoc (ReDoc) that work without internet.

FastAPI's built-in pages load their JavaScript and CSS from a CDN (and ReDoc its fonts from
Google), so on a box without internet the nav's "API" link was a blank page. These are the
same pages, from FastAPI's own HTML builders, pointed at the bundles served by
app/static_files.py; the app turns its built-in routes off (docs_url=None, redoc_url=None).
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse

from app.static_files import docs_asset_url

OPENAPI_URL = "/openapi.json"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"
FAVICON_URL = "/static/favicon.svg"
TITLE = "torchyard API"

router = APIRouter(include_in_schema=False)


@router.get("/docs")
def swagger_ui() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=OPENAPI_URL,
        title=TITLE,
        swagger_js_url=docs_asset_url("swagger-ui-bundle.js"),
        swagger_css_url=docs_asset_url("swagger-ui.css"),
        swagger_favicon_url=FAVICON_URL,
        oauth2_redirect_url=OAUTH2_REDIRECT_URL,
    )


@router.get(OAUTH2_REDIRECT_URL)
def swagger_ui_oauth2_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
def redoc() -> HTMLResponse:
    return get_redoc_html(
        openapi_url=OPENAPI_URL,
        title=TITLE,
        redoc_js_url=docs_asset_url("redoc.standalone.js"),
        redoc_favicon_url=FAVICON_URL,
        with_google_fonts=False,
    )
