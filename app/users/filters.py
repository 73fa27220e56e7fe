"""The `owner` filter that lists (API and pages) share: `me`, `everyone` or a username."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query
from sqlalchemy.orm import Session

from app.auth.models import User
from app.errors import Invalid
from app.users.service import resolve_owner

OwnerQuery = Annotated[
    str | None,
    Query(
        max_length=64,
        description="'me' for your own, a username for theirs; default: everyone's",
        examples=["me"],
    ),
]


def page_owner(session: Session, *, user: User, owner: str) -> tuple[int | None, str]:
    """A page's `?owner=`: (the owner id to filter by, the filter's name as links show it).
    Pages never answer 422: a username nobody has filters by nobody (an empty list)."""
    try:
        owner_id = resolve_owner(session, user=user, owner=owner, loc="owner")
    except Invalid:
        return NOBODY, owner.strip()[:64]
    if owner_id is None:
        return None, "everyone"
    return owner_id, "mine" if owner_id == user.id else owner.strip()


NOBODY = 0  # no row has id 0
