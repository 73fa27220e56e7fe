"""Domain errors: what went wrong, in the domain's words. Services and every other module
below the HTTP layer raise these and never an HTTP exception, so a service reads the same
from a route, a page, the CLI or a worker task; app/http_errors.py maps each class to its
status and JSON body, once.

A message says what is wrong and what to do about it: it is the body a client shows.
`Invalid` carries FastAPI's own 422 field errors (`type`, `loc`, `msg`, `input`), built by
`field_error` only, so clients parse one format whether pydantic or a service refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict


class DomainError(Exception):
    """The base of every error a client may cause; `detail` is what it is told."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class NotFound(DomainError):
    """No such thing (or one the caller may not know exists)."""

    @classmethod
    def of(cls, what: str, ident: object) -> NotFound:
        """The one wording of a missing row: "run 12 not found"."""
        return cls(f"{what} {ident} not found")


class Unauthorized(DomainError):
    """Missing, invalid, expired or revoked credentials."""


class Forbidden(DomainError):
    """Known, but not the caller's to see or change."""


class Conflict(DomainError):
    """The thing's state does not allow it now (finished, busy, taken)."""


class BadRequest(DomainError):
    """A body that cannot be read at all (a malformed upload), before any field is known."""


class TooLarge(DomainError):
    """More bytes than a configured cap; the message names the setting."""


class UnsupportedMedia(DomainError):
    """A body of a kind the route does not take."""


class TooMany(DomainError):
    """A limit on attempts or open streams; the caller may try again after `retry_after`
    seconds."""

    def __init__(self, detail: str, *, retry_after: int) -> None:
        super().__init__(detail)
        self.retry_after = retry_after


class FieldError(TypedDict):
    """One of FastAPI's 422 errors: where (`loc`, its first part body/query/path/header),
    what (`msg`), the kind (`type`) and the value refused (`input`)."""

    type: str
    loc: list[str | int]
    msg: str
    input: Any


def field_error(
    loc: Sequence[str | int], msg: str, value: Any = None, *, kind: str = "value_error"
) -> FieldError:
    """The one builder of a field error."""
    return {"type": kind, "loc": list(loc), "msg": msg, "input": value}


class Invalid(DomainError):
    """Values refused, each named by a field error; `detail` joins their messages into one
    sentence for the places that show a single line (an HTML form's banner)."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        super().__init__("; ".join(e["msg"] for e in errors))
        self.errors = list(errors)

    @classmethod
    def at(
        cls, loc: Sequence[str | int], msg: str, value: Any = None, *, kind: str = "value_error"
    ) -> Invalid:
        """One field refused: `Invalid.at(["query", "after"], "must be ...", raw)`."""
        return cls([field_error(loc, msg, value, kind=kind)])
