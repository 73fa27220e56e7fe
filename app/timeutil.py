"""Timestamps: always timezone-aware UTC."""

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator


def utcnow() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """SQLite hands back naive datetimes even for timezone=True columns; they are UTC."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


# For response models: a timestamp read back from SQLite would otherwise go out without its
# offset, which is not an RFC 3339 date-time (the documented format) and reads as local time.
UtcDateTime = Annotated[datetime, AfterValidator(as_utc)]
