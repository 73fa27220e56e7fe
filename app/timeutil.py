"""Timestamps: always timezone-aware UTC, stored as such."""

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
