"""PostgreSQL ending one connection of the suite's engine just as it sends a given statement
(pg_terminate_backend from another connection: what a failover, an admin or the idle-in-
transaction limit does to a worker): the worker code under test must try its unit of work
again, not give its run up."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event, text

from app.db import get_engine, make_engine


@contextmanager
def cut_once(matches: Callable[[str], bool]) -> Iterator[None]:
    """Within the block, the first statement for which `matches` holds has its connection
    ended before it runs; the block fails if no statement matched."""
    engine = get_engine()
    assert engine.dialect.name == "postgresql", "the services pass runs this test"
    killer = make_engine(engine.url.render_as_string(hide_password=False), pooled=False)
    cut: list[int] = []

    def before(_conn: Any, cursor: Any, statement: str, *_args: Any) -> None:
        if matches(statement) and not cut:
            cut.append(cursor.connection.info.backend_pid)
            with killer.connect() as other:
                other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": cut[0]})

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield
    finally:
        event.remove(engine, "before_cursor_execute", before)
        killer.dispose()
    assert cut, "the statement to cut never ran"
