"""The two channels' network I/O: a webhook POST and an SMTP message. No database here.

The webhook URL is user input, so the server is careful where it connects (SSRF): http and
https only; no credentials in the URL; the host name is resolved once, every address it
resolves to must be public (``ipaddress``'s is_global, not multicast; an IPv4-mapped IPv6
address is judged as its IPv4 address) unless it lies in
``notify_webhook_allow_networks``, and the connection goes to that checked address (the name
is not resolved a second time, so a DNS answer that changes between check and connect, "DNS
rebinding", gains nothing); TLS still verifies the certificate for the name. Redirects are
not followed (a 3xx is a failed attempt), and at most 1 KiB of an error response is read.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import smtplib
import socket
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any
from urllib.parse import SplitResult, urlsplit

from app.settings import Settings, get_settings

MAX_URL = 2000
USER_AGENT = "torchyard-notifications/1"


class SendError(Exception):
    """An attempt failed. ``final``: trying again cannot help (a refused destination)."""

    def __init__(self, message: str, *, final: bool = False) -> None:
        super().__init__(message)
        self.final = final


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a webhook, from its text alone (None: acceptable so far)."""
    if len(url) > MAX_URL:
        return f"the URL is longer than {MAX_URL} characters"
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        return "the URL contains spaces or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return "only http:// and https:// URLs are accepted"
    if not parts.hostname:
        return "the URL has no host"
    if parts.username is not None or parts.password is not None:
        return "credentials in the URL are not accepted (put a token in the path instead)"
    if port == 0:
        return "the URL's port must be 1-65535"
    return None  # the host itself is judged by host_problem (it needs the settings)


# The characters of an IPv4 address in any spelling the C library's inet_aton takes.
_INET_ATON_CHARS = frozenset("0123456789abcdefABCDEFxX.")


def _literal_ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a host names without DNS. Besides the dotted quad, every IPv4 spelling
    the resolver would connect to counts: 2130706433, 0x7f000001, 0177.0.0.1, 127.1, 0
    (inet_aton's forms; getaddrinfo takes them too, so judging only the dotted quad would
    save a loopback URL that fails only when sent)."""
    bare = host.strip("[]")
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    bare = bare.removesuffix(".")
    if bare and set(bare) <= _INET_ATON_CHARS:
        try:
            return ipaddress.IPv4Address(socket.inet_aton(bare))
        except OSError:
            return None
    return None


def _is_localhost(host: str) -> bool:
    name = host.lower().removesuffix(".")
    return name == "localhost" or name.endswith(".localhost")


def _networks(settings: Settings) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    text = settings.notify_webhook_allow_networks
    return [ipaddress.ip_network(n.strip(), strict=False) for n in text.split(",") if n.strip()]


def address_allowed(address: str, settings: Settings) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if any(ip in net for net in _networks(settings)):
        return True
    return ip.is_global and not ip.is_multicast


def host_problem(url: str, settings: Settings | None = None) -> str | None:
    """Why the URL's host is refused, judged without DNS (a literal address, localhost)."""
    settings = settings or get_settings()
    host = urlsplit(url).hostname or ""
    literal = _literal_ip(host)
    if _is_localhost(host):
        literal = ipaddress.ip_address("127.0.0.1")
    if literal is not None and not address_allowed(str(literal), settings):
        return (
            f"{literal} is not a public address; webhooks reach only public addresses "
            "unless the server allows the network (TORCHYARD_NOTIFY_WEBHOOK_ALLOW_NETWORKS)"
        )
    return None


def _resolve(parts: SplitResult, settings: Settings) -> tuple[str, int]:
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise SendError(f"cannot resolve {host}: {exc}") from None
    addresses = [str(info[4][0]) for info in infos]
    refused = [a for a in addresses if not address_allowed(a, settings)]
    if refused or not addresses:
        raise SendError(
            f"{host} resolves to {refused[0] if refused else 'nothing'}, not a public address "
            "(TORCHYARD_NOTIFY_WEBHOOK_ALLOW_NETWORKS allows a network)",
            final=True,
        )
    return addresses[0], port


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


def post_webhook(url: str, body: dict[str, Any], settings: Settings) -> str:
    """POST ``body`` as JSON; returns a short note ("HTTP 200"), raises SendError."""
    problem = url_problem(url) or host_problem(url, settings)
    if problem:
        raise SendError(problem, final=True)
    parts = urlsplit(url)
    address, port = _resolve(parts, settings)
    kind = _PinnedHTTPS if parts.scheme == "https" else _PinnedHTTP
    conn = kind(parts.hostname or "", port, address, settings.notify_timeout_seconds)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
    try:
        conn.request("POST", path, body=data, headers=headers)
        response = conn.getresponse()
        try:
            status = response.status
            excerpt = response.read(1024).decode("utf-8", "replace") if status >= 300 else ""
        finally:
            response.close()
    except (OSError, http.client.HTTPException) as exc:
        raise SendError(f"{type(exc).__name__}: {exc}") from None
    finally:
        conn.close()
    if 200 <= status < 300:
        return f"HTTP {status}"
    if 300 <= status < 400:
        raise SendError(f"HTTP {status}: redirects are not followed")
    shown = " ".join(excerpt.split())[:200]
    raise SendError(f"HTTP {status}" + (f": {shown}" if shown else ""))


@dataclass(frozen=True)
class Mail:
    to: str
    subject: str
    body: str


def send_mail(mail: Mail, settings: Settings) -> str:
    """One message through the box's SMTP server; returns a note, raises SendError."""
    if not settings.smtp_host:
        raise SendError("e-mail is not set up on this server (TORCHYARD_SMTP_HOST)", final=True)
    message = EmailMessage()
    message["From"] = settings.smtp_from
    message["To"] = mail.to
    message["Subject"] = " ".join(mail.subject.split())[:200]  # one line, whatever a name holds
    message.set_content(mail.body)
    try:
        with smtplib.SMTP(
            settings.smtp_host, settings.smtp_port, timeout=settings.notify_timeout_seconds
        ) as smtp:
            if settings.smtp_starttls:
                smtp.starttls(context=ssl.create_default_context())
            if settings.smtp_user:
                smtp.login(settings.smtp_user, settings.smtp_password)
            refused = smtp.send_message(message)
    except (OSError, smtplib.SMTPException) as exc:
        raise SendError(f"{type(exc).__name__}: {exc}") from None
    if refused:
        raise SendError(f"the SMTP server refused {', '.join(refused)}")
    return f"accepted by {settings.smtp_host}:{settings.smtp_port}"
