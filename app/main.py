"""The FastAPI application: API routers, error shape, and the schema-at-head check."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app.auth.api import router as auth_router
from app.experiments.api import router as experiments_router
from app.prestart import schema_is_current
from app.runs.api import router as runs_router


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
        title="torchyard",
        description="Launch, watch and compare PyTorch training runs on your own GPU box.",
        version="0.1.0",
    )
    app.include_router(auth_router)
    app.include_router(experiments_router)
    app.include_router(runs_router)

    @app.get("/api/health", tags=["health"])
    def health() -> dict[str, str]:
        return {"status": "ok"}

    return app
