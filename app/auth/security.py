"""Password hashing (argon2) and opaque bearer tokens (random, stored as SHA-256)."""

from __future__ import annotations

import hashlib
import secrets
from functools import lru_cache

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

from app.settings import get_settings


@lru_cache(maxsize=4)
def _hasher_for(time_cost: int, memory_kib: int) -> PasswordHasher:
    return PasswordHasher(time_cost=time_cost, memory_cost=memory_kib)


def _hasher() -> PasswordHasher:
    """The hasher of the configured cost."""
    settings = get_settings()
    return _hasher_for(settings.password_hash_time_cost, settings.password_hash_memory_kib)


def hash_password(password: str) -> str:
    return _hasher().hash(password)


def verify_password(password_hash: str, password: str) -> bool:
    try:
        return _hasher().verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def needs_rehash(password_hash: str) -> bool:
    """True when the hash was made with other parameters than today's hasher uses."""
    try:
        return _hasher().check_needs_rehash(password_hash)
    except (InvalidHashError, ValueError):
        return False


def new_token() -> str:
    return "ty_" + secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def generate_password() -> str:
    return secrets.token_urlsafe(12)
