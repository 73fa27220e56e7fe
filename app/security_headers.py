"""Headers every response carries: no MIME sniffing, no framing (clickjacking), no referrer
leaking run URLs to other sites, a Content-Security-Policy, and `Cache-Control: no-store` on
API answers. A pure ASGI middleware, so SSE streams pass untouched.

The policy allows scripts from this origin only: no inline script, no eval, no other host.
An injected `<script>` or `onerror=` in a page (a run name, a metric key, a log line that
escaped escaping) then does not run. Styles may be inline: the chart library sets them on the
elements it draws (and the style attribute cannot run code). A route that needs more (the API
docs' inline start-up scripts, app/api_docs.py) sets its own header, which is kept.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP_DIRECTIVES = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self' 'unsafe-inline'",
    "img-src": "'self' data: blob:",
    "font-src": "'self' data:",
    "connect-src": "'self'",
    "worker-src": "'self' blob:",
    "object-src": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}


def content_security_policy(**overrides: str) -> str:
    """The policy text, with some directives replaced (keys with `_` for `-`)."""
    directives = {**CSP_DIRECTIVES, **{k.replace("_", "-"): v for k, v in overrides.items()}}
    return "; ".join(f"{name} {value}" for name, value in directives.items())


SECURITY_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"content-security-policy", content_security_policy().encode()),
)
# API answers are one user's data (runs, tokens, logs): no cache (a shared proxy's, or the
# browser's on a shared machine) may keep them.
API_HEADERS = ((b"cache-control", b"no-store"),)


class SecurityHeadersMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        is_api = scope["path"].startswith("/api/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if is_api:
                    headers = [(k, v) for k, v in headers if k.lower() != b"cache-control"]
                    headers.extend(API_HEADERS)
                present = {name.lower() for name, _ in headers}
                extra = [(k, v) for k, v in SECURITY_HEADERS if k not in present]
                message["headers"] = [*headers, *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)
