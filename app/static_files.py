"""Static assets: our own JS/CSS, plotly.min.js straight from the installed plotly package, and
the Swagger UI and ReDoc bundles straight from the installed fastapi-offline package.

The chart library is 4.8 MB; it is served under a versioned URL with a year-long immutable
cache header (and gzip from the app's middleware), so a browser parses it once and the run
page lands well under a second afterwards. The API docs' bundles (2.8 MB) are served the same
way. Nothing comes from a CDN: the pages work on a box without internet.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import metadata, resources
from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent / "static"
IMMUTABLE = "public, max-age=31536000, immutable"
# The API docs' files: URL name -> media type, all under fastapi_offline/static.
DOCS_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "text/javascript",
}

router = APIRouter(include_in_schema=False)


@lru_cache
def plotly_version() -> str:
    return metadata.version("plotly")


@lru_cache
def _plotly_path() -> Path:
    return Path(str(resources.files("plotly") / "package_data" / "plotly.min.js"))


def plotly_url() -> str:
    return f"/static/vendor/plotly-{plotly_version()}.min.js"


@router.get("/static/vendor/plotly-{version}.min.js")
def plotly_js(version: str) -> FileResponse:
    return FileResponse(
        _plotly_path(), media_type="text/javascript", headers={"Cache-Control": IMMUTABLE}
    )


@lru_cache
def docs_assets_version() -> str:
    return metadata.version("fastapi-offline")


def docs_asset_url(name: str) -> str:
    """Versioned URL of one of DOCS_ASSETS: a new fastapi-offline release is a new URL."""
    if name not in DOCS_ASSETS:
        raise KeyError(name)
    return f"/static/vendor/docs-{docs_assets_version()}/{name}"


@router.get("/static/vendor/docs-{version}/{name}")
def docs_asset(version: str, name: str) -> FileResponse:
    media_type = DOCS_ASSETS.get(name)
    if media_type is None:
        raise HTTPException(status_code=404, detail=f"no API docs asset named {name!r}")
    path = Path(str(resources.files("fastapi_offline") / "static" / name))
    return FileResponse(path, media_type=media_type, headers={"Cache-Control": IMMUTABLE})


def static_app() -> StaticFiles:
    return StaticFiles(directory=STATIC_DIR)
