"""What runs before the server starts: schema to Alembic head, then the admin account."""

from __future__ import annotations

from app import migrate
from app.auth.service import ensure_admin
from app.db import get_engine, session_scope
from app.settings import get_settings


def prestart() -> str:
    """Returns a line that says where the admin's password comes from."""
    settings = get_settings()
    settings.make_data_dir()
    migrate.upgrade(settings.resolved_database_url)
    with session_scope() as session:
        generated = ensure_admin(session, password=settings.admin_password)
    if generated:
        return f"created user 'admin' with the generated password: {generated}  (shown once)"
    if settings.admin_password:
        return "user 'admin': password from TORCHYARD_ADMIN_PASSWORD"
    return "user 'admin' exists already (password as set before)"


def schema_is_current() -> tuple[bool, str | None, str | None]:
    url = get_settings().resolved_database_url
    current, head = migrate.current_revision(get_engine()), migrate.head_revision(url)
    return current == head, current, head
