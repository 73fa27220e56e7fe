"""The FastAPI application: API routers, error shape, and the schema-at-head check."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import RedirectResponse

from app import static_files
from app.auth.api import router as auth_router
from app.auth.deps import LoginRequired
from app.auth.views import router as auth_views
from app.compare.views import router as compare_views
from app.experiments.api import router as experiments_router
from app.experiments.views import router as experiments_views
from app.gpus.api import router as gpus_router
from app.gpus.views import router as gpus_views
from app.prestart import schema_is_current
from app.runs.api import router as runs_router
from app.runs.views import router as runs_views
from app.security_headers import SecurityHeadersMiddleware
from app.settings import get_settings


class SchemaNotCurrent(RuntimeError):
    pass


@asynccontextmanager
async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
    ok, current, head = schema_is_current()
    if not ok:
        raise SchemaNotCurrent(
            f"database schema is at {current!r}, this server needs {head!r}: "
            "run `torchyard db upgrade` first"
        )
    yield


def create_app() -> FastAPI:
    app = FastAPI(
        lifespan=lifespan,
        max_body_size=get_settings().max_body_bytes,
        title="torchyard",
        description="Launch, watch and compare PyTorch training runs on your own GPU box.",
        version="0.1.0",
    )
    app.add_middleware(GZipMiddleware, minimum_size=1024)
    app.add_middleware(SecurityHeadersMiddleware)
    for router in (
        auth_router,
        experiments_router,
        runs_router,
        gpus_router,
        static_files.router,
        auth_views,
        experiments_views,
        runs_views,
        compare_views,
        gpus_views,
    ):
        app.include_router(router)
    app.mount("/static", static_files.static_app(), name="static")

    @app.exception_handler(LoginRequired)
    async def to_login(_request: Request, exc: LoginRequired) -> RedirectResponse:
        return RedirectResponse(f"/login?next={quote(exc.next_url)}", status_code=303)

    @app.get("/api/health", tags=["health"])
    def health() -> dict[str, str]:
        return {"status": "ok"}

    return app
