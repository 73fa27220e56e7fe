"""HTML pages of this domain (filled in by the web UI work)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(include_in_schema=False)
