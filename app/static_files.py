"""Static assets: our own JS/CSS, and plotly.min.js straight from the installed plotly package.

The chart library is 4.8 MB; it is served under a versioned URL with a year-long immutable
cache header (and gzip from the app's middleware), so a browser parses it once and the run
page lands well under a second afterwards. Nothing comes from a CDN.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import metadata, resources
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent / "static"
IMMUTABLE = "public, max-age=31536000, immutable"

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


def static_app() -> StaticFiles:
    return StaticFiles(directory=STATIC_DIR)
