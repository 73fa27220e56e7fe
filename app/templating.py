"""Jinja2 templates for the HTML pages, with what every page needs (user, CSRF token)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from app.auth.deps import csrf_cookie
from app.auth.models import User
from app.runs.state.notices import size_text
from app.static_files import chart_asset_url, module_preloads

# app/templates links to the repository's top-level templates/: in a checkout (and an editable
# install) it leads there, and a wheel carries the files themselves at this place.
TEMPLATES_DIR = Path(__file__).parent / "templates"

templates = Jinja2Templates(directory=TEMPLATES_DIR)
templates.env.globals["chart_asset_url"] = chart_asset_url
templates.env.globals["module_preloads"] = module_preloads
templates.env.filters["size"] = size_text  # bytes as people read them: "1.5 MiB"


def render(
    request: Request, name: str, *, user: User | None, status_code: int = 200, **context: Any
) -> HTMLResponse:
    return templates.TemplateResponse(
        request,
        name,
        {"user": user, "csrf_token": request.cookies.get(csrf_cookie(), ""), **context},
        status_code=status_code,
    )
