"""The FastAPI application: API routers, error shape, and the schema-at-head check."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import quote

from fastapi import Depends, FastAPI, Request
from fastapi.responses import RedirectResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from app import api_docs, static_files
from app.auth import token_use
from app.auth.api import router as auth_router
from app.auth.deps import LoginRequired, PasswordChangeRequired
from app.auth.views import router as auth_views
from app.code.api import router as code_router
from app.compare.api import router as compare_router
from app.compare.views import router as compare_views
from app.compression import NetworkGZipMiddleware
from app.experiments.api import router as experiments_router
from app.experiments.views import router as experiments_views
from app.fleet.api import router as fleet_router
from app.fleet.views import router as fleet_views
from app.gpus.api import router as gpus_router
from app.gpus.fairshare_api import router as fair_share_router
from app.gpus.views import router as gpus_views
from app.http_errors import error_responses, install_error_handlers
from app.mlflow.artifacts import router as mlflow_artifacts_router
from app.mlflow.routes import router as mlflow_router
from app.notifications.api import router as notifications_router
from app.notifications.views import router as notifications_views
from app.ops import shutdown
from app.ops.prometheus import RequestTimer
from app.ops.prometheus import router as prometheus_router
from app.ops.ready import router as ready_router
from app.pages import not_found
from app.periodic import Process, Runner, for_process
from app.prestart import schema_is_current
from app.runs.api import router as runs_router
from app.runs.delete_api import router as run_delete_router
from app.runs.files.images_api import router as run_images_router
from app.runs.query.list_api import router as run_list_router
from app.runs.views import router as runs_views
from app.saved_views.api import router as saved_views_router
from app.scheduled import JOBS
from app.security_headers import SecurityHeadersMiddleware
from app.sessions.api import router as sessions_router
from app.sessions.proxy import router as sessions_proxy
from app.settings import get_settings
from app.strict_json import StrictJSONMiddleware
from app.strict_query import reject_unknown_query
from app.sweeps.api import router as sweeps_router
from app.sweeps.views import router as sweeps_views
from app.users.api import router as users_router
from app.users.ceilings_api import router as ceilings_router
from app.users.views import router as users_views


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
    # A SIGTERM ends the event streams at once, not after their runs (app/ops/shutdown.py).
    shutdown.install()
    # The API's periodic work (app/scheduled.py): lost runs are found even when no worker is
    # left to find them, sweeps go on after a restart before a worker's own round,
    # notifications go out (a run cancelled while queued has no worker), token use is written.
    runner = Runner(for_process(Process.API, JOBS)).start()
    try:
        yield
    finally:
        runner.stop()
        token_use.flush_at_exit()  # this process's token uses not written yet


def create_app() -> FastAPI:
    app = FastAPI(
        lifespan=lifespan,
        max_body_size=get_settings().max_body_bytes,
        title="torchyard",
        description="Launch, watch and compare PyTorch training runs on your own GPU box.",
        version="0.1.0",
        # Served by app/api_docs.py from local files instead of FastAPI's CDN-backed pages.
        docs_url=None,
        redoc_url=None,
    )
    app.add_middleware(StrictJSONMiddleware, max_body_bytes=get_settings().max_body_bytes)
    # Level 1: a 200 KB metrics response takes ~2 ms instead of ~20 ms at the default 9, for
    # 4% more bytes; under load that difference was most of the API's p95 (bench/load.py).
    # None for a client on this machine (app/compression.py: there it costs more than it saves).
    app.add_middleware(
        NetworkGZipMiddleware,
        minimum_size=1024,
        compresslevel=1,
        behind_proxy=bool(get_settings().trusted_proxies),
    )
    app.add_middleware(SecurityHeadersMiddleware)
    app.add_middleware(RequestTimer)
    # X-Forwarded-For only from the configured proxies; uvicorn's own proxy handling is off
    # (torchyard/cli/server.py), since it trusts 127.0.0.1 by default. Outermost: every layer and
    # the login throttle see the forwarded client.
    if get_settings().trusted_proxies:
        app.add_middleware(
            ProxyHeadersMiddleware,
            trusted_hosts=[h.strip() for h in get_settings().trusted_proxies.split(",")],
        )
    # MLflow's API in MLflow's shape (app/mlflow: its own auth, errors and query rules), first:
    # a request is matched against the routes in order, and an MLflow client's log-batch per
    # step is the app's most frequent request (its paths overlap no other route's).
    for router in (mlflow_router, mlflow_artifacts_router):
        app.include_router(router)
    # Every API route answers 401 without valid credentials (or with wrong ones, for the
    # password login): documented once here, the routes add their own 403/404/409.
    for api_router in (
        auth_router,
        experiments_router,
        runs_router,
        run_list_router,
        run_images_router,
        run_delete_router,
        code_router,
        compare_router,
        gpus_router,
        fleet_router,
        notifications_router,
        users_router,
        ceilings_router,
        fair_share_router,
        sweeps_router,
        saved_views_router,
        sessions_router,
    ):
        app.include_router(
            api_router,
            responses=error_responses(401),
            dependencies=[Depends(reject_unknown_query)],
        )
    for router in (
        ready_router,
        prometheus_router,
        static_files.router,
        api_docs.router,
        auth_views,
        experiments_views,
        runs_views,
        compare_views,
        gpus_views,
        fleet_views,
        users_views,
        notifications_views,
        sweeps_views,
        sessions_proxy,
    ):
        app.include_router(router)
    app.mount("/static", static_files.static_app(), name="static")
    install_error_handlers(app)
    app.add_exception_handler(StarletteHTTPException, not_found)  # a browser's 404: a page

    @app.exception_handler(PasswordChangeRequired)
    async def to_password_change(
        _request: Request, _exc: PasswordChangeRequired
    ) -> RedirectResponse:
        return RedirectResponse("/account", status_code=303)

    @app.exception_handler(LoginRequired)
    async def to_login(_request: Request, exc: LoginRequired) -> RedirectResponse:
        return RedirectResponse(f"/login?next={quote(exc.next_url)}", status_code=303)

    @app.get("/api/health", tags=["health"])
    def health() -> dict[str, str]:
        return {"status": "ok"}

    return app
