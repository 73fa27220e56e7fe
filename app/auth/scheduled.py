"""The auth domain's periodic work (app.periodic): the API writes the token uses it noted in
memory (app/auth/token_use.py), so that no request writes them itself."""

from __future__ import annotations

from app.auth import token_use
from app.periodic import Process, declare

FLUSH_TOKEN_USE = declare(
    "auth.token_use",
    token_use.flush,
    every="token_use_flush_seconds",
    runs_in={Process.API},
)
