"""Static assets: our own JS/CSS, the chart library (uPlot) straight from the installed
uplot-python package, and the Swagger UI and ReDoc bundles straight from the installed
fastapi-offline package.

Vendor files are served under versioned URLs with a year-long immutable cache header (and gzip
from the app's middleware). uPlot is 120 KB (Plotly, used before, was 4.8 MB and took a fresh
browser ~1.2 s to parse on every first chart page); the pages draw only line charts.
Nothing comes from a CDN: the pages work on a box without internet.
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


# The chart library's files: URL name -> (file in uplot-python's static folder, media type).
CHART_ASSETS = {
    "uPlot.js": ("uPlot.iife.js", "text/javascript"),
    "uPlot.css": ("uPlot.min.css", "text/css"),
}


@lru_cache
def chart_version() -> str:
    return metadata.version("uplot-python")


def chart_asset_url(name: str) -> str:
    """Versioned URL of one of CHART_ASSETS: a new uplot-python release is a new URL."""
    if name not in CHART_ASSETS:
        raise KeyError(name)
    return f"/static/vendor/chart-{chart_version()}/{name}"


@router.get("/static/vendor/chart-{version}/{name}")
def chart_asset(version: str, name: str) -> FileResponse:
    found = CHART_ASSETS.get(name)
    if found is None:
        raise HTTPException(status_code=404, detail=f"no chart asset named {name!r}")
    file_name, media_type = found
    path = Path(str(resources.files("uplot") / "static" / file_name))
    return FileResponse(path, media_type=media_type, headers={"Cache-Control": IMMUTABLE})


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
