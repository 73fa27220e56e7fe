"""When each API token was last used, recorded off the request path.

The token check used to stamp `api_tokens.last_used_at` itself (at most once a minute per
token), so a read request wrote the database: on the embedded SQLite stack that write queued
behind ingestion's and 'database is locked' cut GETs and live streams (issue 27 item 4). Now
the check only notes the use here, in this process's memory, and `flush` writes what was noted
in one short transaction of its own: a periodic job of the API (app/auth/scheduled.py, every
`token_use_flush_seconds`) and once more on the way out. The tokens list shows the newer of
the stored time and this process's unflushed one (`last_used`); another server process's uses appear
after its flush.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime

from sqlalchemy import or_, update

from app.auth.models import ApiToken
from app.db import session_scope
from app.timeutil import as_utc

log = logging.getLogger(__name__)

_lock = threading.Lock()
_pending: dict[int, datetime] = {}


def note(token_id: int, when: datetime) -> None:
    """The token was used at `when`: kept in memory until the next flush (no database)."""
    with _lock:
        if token_id not in _pending or _pending[token_id] < when:
            _pending[token_id] = when


def last_used(token_id: int, stored: datetime | None) -> datetime | None:
    """The newer of the stored last use and this process's unflushed one."""
    with _lock:
        pending = _pending.get(token_id)
    if pending is None or (stored is not None and as_utc(stored) >= pending):
        return stored
    return pending


def flush() -> int:
    """Write the noted uses (a stored time is never moved back); how many tokens were written.
    On an error the uses are noted again for the next flush."""
    with _lock:
        taken = dict(_pending)
        _pending.clear()
    if not taken:
        return 0
    try:
        with session_scope() as session:
            for token_id, when in taken.items():
                session.execute(
                    update(ApiToken)
                    .where(
                        ApiToken.id == token_id,
                        or_(ApiToken.last_used_at.is_(None), ApiToken.last_used_at < when),
                    )
                    .values(last_used_at=when)
                )
    except Exception:
        for token_id, when in taken.items():
            note(token_id, when)
        raise
    return len(taken)


def flush_at_exit() -> None:
    """The last flush, as the API stops (its lifespan): the uses noted since the last round."""
    try:
        flush()
    except Exception:
        log.exception("recording token use at shutdown failed")
