"""The work of `torchyard admin reset-password NAME` (its options: torchyard/cli/admin.py): on
the server machine, straight on the database (found the way the server finds it: the one
Settings class, TORCHYARD_* variables), so a lost admin password is not a dead end. It works
with the server stopped or running (SQLite in WAL mode lets it write while the server reads;
PostgreSQL anyway), and clears the user's failed logins so they are not locked out by the
attempts that made them need it.
"""

from __future__ import annotations

from app.auth import ratelimit
from app.db import session_scope
from app.prestart import schema_is_current
from app.settings import get_settings
from app.users import service


class ResetRefused(Exception):
    """The password or the database is not fit for the reset; the message says why."""


def reset_password(name: str, password: str, *, temporary: bool, enable: bool) -> list[str]:
    """Set ``name``'s password; the lines to print. ``temporary``: it must be changed at the
    next login (a generated one, printed once)."""
    problem = service.password_problem(password)
    if problem is not None:
        raise ResetRefused(problem)
    where = get_settings().resolved_database_url.split("@")[-1]
    ok, current, head = schema_is_current()
    if not ok:
        raise ResetRefused(
            f"the database ({where}) is at schema {current!r}, not {head!r}: "
            "run `torchyard db upgrade` (or start the server once) first"
        )
    with session_scope() as session:
        user = service.find_by_name(session, name)
        if user is None:
            names = ", ".join(u.username for u in service.list_users(session)) or "none"
            raise ResetRefused(f"no user named {name!r} in {where} (users: {names})")
        service.set_password(session, user=user, password=password, temporary=temporary)
        ratelimit.forget(session, username=name)
        disabled = not user.is_active
        if disabled and enable:
            service.set_disabled(session, user=user, disabled=False)
    lines = [f"password of {name} reset in {where}"]
    if temporary:
        lines.append(f"new password: {password}  (shown once)")
    if disabled and not enable:
        lines.append(f"note: {name} is disabled; add --enable to enable it too")
    return lines
