"""Static assets: our own JS/CSS, the chart library (uPlot) straight from the installed
uplot-python package, and the Swagger UI and ReDoc bundles straight from the installed
fastapi-offline package.

Vendor files are served under versioned URLs with a year-long immutable cache header (and gzip
from the app's middleware for a browser across a network: app/compression.py). uPlot is 120 KB
(Plotly, used before, was 4.8 MB and took a fresh browser ~1.2 s to parse on every first chart
page); the pages draw only line charts.
Nothing comes from a CDN: the pages work on a box without internet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata, resources
from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from app.runs.files.job_files import within

STATIC_DIR = Path(__file__).resolve().parent / "static"
IMMUTABLE = "public, max-age=31536000, immutable"

router = APIRouter(include_in_schema=False)


@dataclass(frozen=True)
class Vendor:
    """Files served straight from an installed package, under a URL that carries the
    package's version: a new release is a new URL, so the year-long cache is never stale."""

    prefix: str  # the URL is /static/vendor/{prefix}-{version}/{name}
    distribution: str  # whose version goes in the URL
    folder: tuple[str, ...]  # the importable package, then the folders holding the files
    files: dict[str, tuple[str, str]]  # URL name -> (file name there, media type)

    @property
    def version(self) -> str:
        return _version(self.distribution)

    def url(self, name: str) -> str:
        if name not in self.files:
            raise KeyError(name)
        return f"/static/vendor/{self.prefix}-{self.version}/{name}"

    def path(self, name: str) -> Path:
        package, *folders = self.folder
        return Path(str(resources.files(package).joinpath(*folders, self.files[name][0])))


CHARTS = Vendor(
    "chart",
    "uplot-python",
    ("uplot", "static"),
    {
        "uPlot.js": ("uPlot.iife.js", "text/javascript"),
        "uPlot.css": ("uPlot.min.css", "text/css"),
    },
)
DOCS = Vendor(
    "docs",
    "fastapi-offline",
    ("fastapi_offline", "static"),
    {
        name: (name, media_type)
        for name, media_type in (
            ("swagger-ui-bundle.js", "text/javascript"),
            ("swagger-ui.css", "text/css"),
            ("redoc.standalone.js", "text/javascript"),
        )
    },
)
VENDORS = {vendor.prefix: vendor for vendor in (CHARTS, DOCS)}


@lru_cache
def _version(distribution: str) -> str:
    return metadata.version(distribution)


def chart_asset_url(name: str) -> str:
    return CHARTS.url(name)


def docs_asset_url(name: str) -> str:
    return DOCS.url(name)


@router.get("/static/vendor/{prefix}-{version}/{name}")
def vendor_file(prefix: str, version: str, name: str) -> FileResponse:
    vendor = VENDORS.get(prefix)
    if vendor is None or name not in vendor.files:
        raise HTTPException(status_code=404, detail=f"no vendor file {prefix}/{name}")
    media_type = vendor.files[name][1]
    return FileResponse(
        vendor.path(name), media_type=media_type, headers={"Cache-Control": IMMUTABLE}
    )


# `import ... from "./x.js"` / `export ... from "../y.js"`: our modules' relative imports.
_IMPORT = re.compile(r'^\s*(?:import|export)\b[^;]*?\bfrom\s+"(\.{1,2}/[^"]+)"', re.MULTILINE)


@lru_cache
def module_preloads(*entries: str) -> tuple[str, ...]:
    """The /static URLs of the entry modules and every module they import, transitively: a
    page's <link rel="modulepreload"> of each lets the browser fetch them all at once, not an
    import level a round trip (four levels on the experiment page, ~300 ms of its first second
    on a loaded box). Read once per process, as the templates are."""
    seen: dict[Path, None] = {}
    todo = [STATIC_DIR / name for name in entries]
    while todo:
        path = todo.pop(0).resolve()
        if path in seen or not path.is_file() or not within(path, STATIC_DIR):
            continue
        seen[path] = None
        todo += [path.parent / spec for spec in _IMPORT.findall(path.read_text())]
    return tuple(f"/static/{p.relative_to(STATIC_DIR).as_posix()}" for p in seen)


def static_app() -> StaticFiles:
    return StaticFiles(directory=STATIC_DIR)
