"""The client CLI starts without the server stack: the base install (no `server` extra) has
none of it, so `torchyard login/submit/ls/...` must not import it, nor our server packages
(tests/test_packaging.py checks the real install; this is the fast guard in every run)."""

from __future__ import annotations

from tests.test_job_imports import loaded_top_level_modules

SERVER_STACK = {
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "celery",
    "kombu",
    "pydantic_settings",
    "jinja2",
    "torch",
    # our own server side: the server, the host agent, the schema's migrations
    "app",
    "worker",
    "migrations",
}


def test_the_client_cli_imports_neither_the_server_stack_nor_torch() -> None:
    loaded = loaded_top_level_modules(
        "from torchyard.cli import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['--help']) == 0 and main(['submit', '--help']) == 0\n"
    )
    assert "typer" in loaded and "httpx" in loaded
    assert loaded.isdisjoint(SERVER_STACK), sorted(loaded & SERVER_STACK)
