"""Timestamps: always timezone-aware UTC."""

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """SQLite hands back naive datetimes even for timezone=True columns; they are UTC."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
