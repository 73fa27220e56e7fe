"""Every write to a table is made by the table's owner: a pytest plugin that checks it while
the suite runs (issue 38).

docs/architecture.md "Who writes each table" names one module per table, or per column group
where a table is split (`runs.status`: app/runs/state/lifecycle.py). This plugin reads that table
and watches what actually reaches the database, by meaning rather than by names in the
source:

- an attribute of a mapped object in a session set (`run.name = ...`): SQLAlchemy's
  attribute `set` event on every column of every mapped class, whatever name the class was
  imported under (a `Run` re-exported from a service module is still `runs`);
- an object added to a session (`transient_to_pending`: a new row) or deleted
  (`Session.delete`, wrapped: SQLAlchemy has no event at the call, only at the flush);
- every other statement as the driver gets it (`before_cursor_execute` on every engine):
  ORM `update()`/`delete()`/`insert()`, Core, `text()` and `exec_driver_sql` alike, the
  written table (and an UPDATE's columns) parsed from the SQL. What the ORM's own flush
  emits is skipped: the events above attributed it when the program asked for it.

A write is the module of the nearest frame in the repository, past SQLAlchemy, the standard
library and the plumbing named in PLUMBING. In app/ it must be the owner; in worker/ it is
always wrong (the host agent calls app's services); torchyard/ is the job's code, which has
no database. Frames in tests/ (factories, a test's own setup) are the test's, not the
product's, and migrations/ change the schema: neither is checked. A violation raises where
it happens and also fails the test that made it, in case the product's code swallowed the
error (a savepoint's `except Exception`).

Only this process is watched: the live stack's API and worker run in their own processes.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "architecture.md"
SECTION = "## Who writes each table"
# Frames in these files hand a session on and never decide what is written.
PLUMBING = frozenset({"app/db.py"})
CHECKED = ("app/", "worker/", "torchyard/")
EXEMPT = ("migrations/",)
# The column-group words of the table's second column.
NEW_ROWS, DELETED_ROWS, REST = "+rows", "-rows", "*"
RECORD_ENV = "TORCHYARD_OWNERS_RECORD"


class OwnershipError(AssertionError):
    """A module wrote a table (or column) that another module owns."""


@dataclass
class Owners:
    """table -> column (or NEW_ROWS, DELETED_ROWS, REST) -> the owning module's path."""

    tables: dict[str, dict[str, str]] = field(default_factory=dict)

    def owner(self, table: str, column: str) -> str | None:
        groups = self.tables.get(table)
        if groups is None:
            return None
        return groups.get(column) or groups.get(REST)


_CELL_CODE = re.compile(r"`([^`]+)`")


def parse_owners(markdown: str) -> Owners:
    """The ownership table of docs/architecture.md: `| `table` | columns | `owner` |` rows.
    The columns cell names backticked columns, "new rows", "deleted rows", or "the rest"
    (every column and row operation of the table not named in another of its rows)."""
    start = markdown.index(SECTION)
    end = markdown.find("\n## ", start + len(SECTION))
    owners = Owners()
    for line in markdown[start : end if end != -1 else None].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        table = _CELL_CODE.findall(cells[0])[0]
        owner = _CELL_CODE.findall(cells[2])[0]
        groups = owners.tables.setdefault(table, {})
        keys = _CELL_CODE.findall(cells[1])
        text = _CELL_CODE.sub("", cells[1])
        keys += [
            k
            for word, k in (
                ("new rows", NEW_ROWS),
                ("deleted rows", DELETED_ROWS),
                ("the rest", REST),
            )
            if word in text
        ]
        for key in keys:
            if key in groups and groups[key] != owner:
                raise ValueError(f"{table}.{key} has two owners: {groups[key]} and {owner}")
            groups[key] = owner
    return owners


# --- who is writing: the nearest frame of ours -----------------------------------------------

_THIS = Path(__file__).resolve().as_posix()
_REPO_PREFIX = REPO.as_posix() + "/"
_kind_of_file: dict[str, str | None] = {}


def _relative(filename: str) -> str | None:
    """The file's path in the repository, or None outside it (SQLAlchemy, the stdlib, the
    venv inside the repository)."""
    if filename in _kind_of_file:
        return _kind_of_file[filename]
    path = Path(filename).resolve().as_posix() if filename.startswith(("/", ".")) else filename
    rel: str | None = None
    if path.startswith(_REPO_PREFIX) and path != _THIS:
        rel = path[len(_REPO_PREFIX) :]
        if rel.startswith(".") or "/site-packages/" in rel or rel in PLUMBING:
            rel = None
    _kind_of_file[filename] = rel
    return rel


def writer(frame: FrameType | None) -> str | None:
    """The module (path in the repository) the write is checked against, or None when the
    nearest frame of ours is a test's or a migration's."""
    while frame is not None:
        rel = _relative(frame.f_code.co_filename)
        if rel is not None:
            return rel if rel.startswith(CHECKED) else None
        frame = frame.f_back
    return None


def _in_flush(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.endswith("orm/unitofwork.py"):
            return True
        frame = frame.f_back
    return False


# --- what is written: a statement's table and columns ----------------------------------------

_TOKEN = re.compile(
    r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|`[^`]*`|\[[^\]]*\]|[A-Za-z_][\w.$]*|\(|\)|,|=|\S"""
)
_VERBS = {"INSERT", "UPDATE", "DELETE", "REPLACE", "SELECT", "VALUES"}


def _name(token: str) -> str:
    token = token.split(".")[-1]
    return token.strip('"`[]').lower()


def written_by(sql: str) -> tuple[str, list[str]] | None:
    """(table, columns) a statement writes: columns are NEW_ROWS for an INSERT (or REPLACE,
    an upsert), DELETED_ROWS for a DELETE, an UPDATE's SET columns; None for a read. A
    data-modifying CTE (PostgreSQL's WITH d AS (DELETE ...)) counts as the statement's write."""
    sql = re.sub(r"--[^\n]*|/\*.*?\*/", " ", sql, flags=re.S)
    tokens = _TOKEN.findall(sql)
    i, depth = 0, 0
    if tokens and tokens[0].upper() == "WITH":  # a CTE's own write, else the main verb
        while i < len(tokens) - 1:
            t = tokens[i]
            if t == "(" and tokens[i + 1].upper() in _WRITES:
                return _written(tokens, i + 1)
            depth += (t == "(") - (t == ")")
            i += 1
            if depth == 0 and t == ")" and tokens[i].upper() in _VERBS:
                break
    return _written(tokens, i) if i < len(tokens) else None


_WRITES = {"INSERT", "UPDATE", "DELETE", "REPLACE"}


def _written(tokens: list[str], i: int) -> tuple[str, list[str]] | None:
    verb = tokens[i].upper()
    rest = [t.upper() for t in tokens[i + 1 : i + 6]]
    if verb in ("INSERT", "REPLACE"):
        at = i + 1 + next((n for n, t in enumerate(rest) if t == "INTO"), -1) + 1
        return _name(tokens[at]), [NEW_ROWS]
    if verb == "DELETE":
        at = i + 1 + (rest[:1] == ["FROM"])
        return _name(tokens[at]), [DELETED_ROWS]
    if verb != "UPDATE":
        return None
    at = i + 1 + (rest[:1] == ["OR"]) * 2  # UPDATE OR IGNORE t
    columns, depth, expect = [], 0, False
    for t in tokens[at + 1 :]:
        up = t.upper()
        if t == "(":
            depth += 1
        elif t == ")":
            depth -= 1
        elif depth == 0 and up in ("WHERE", "RETURNING", "FROM"):
            break
        elif depth == 0 and (up == "SET" or t == ","):
            expect = True
        elif expect:
            columns.append(_name(t))
            expect = False
    return _name(tokens[at]), columns


# --- the guard ----------------------------------------------------------------------------


class Guard:
    """Checks each write against the owners; remembers violations for the test's end."""

    def __init__(self, owners: Owners, tables: set[str]) -> None:
        self.owners = owners
        self.tables = tables
        self.violations: list[str] = []
        self.enforcing = True
        # TORCHYARD_OWNERS_RECORD=<file>: every write's (module, table, column) is listed there
        # at the end and nothing is refused: how the table of owners was first drawn up.
        self.record: set[tuple[str, str, str]] | None = None
        self._lock = threading.Lock()

    def check(self, module: str | None, table: str, columns: list[str]) -> None:
        if module is None or table not in self.tables:
            return
        if self.record is not None:
            self.record.update((module, table, c) for c in columns)
            return
        wrong: list[tuple[str, str]] = []
        for column in columns:
            owner = (
                "an app service"
                if module.startswith("worker/")
                else self.owners.owner(table, column)
            )
            if owner != module:
                wrong.append((column, owner or "none: add it to the table"))
        if not wrong:
            return
        what = ", ".join(f"{_describe(table, c)} (owner: {o})" for c, o in wrong)
        message = f"{module} writes {what}: call the owner's service instead (docs/architecture.md)"
        with self._lock:
            self.violations.append(message)
        if self.enforcing:
            raise OwnershipError(message)

    def take(self) -> list[str]:
        with self._lock:
            found, self.violations = self.violations, []
        return found


def _describe(table: str, column: str) -> str:
    if column == NEW_ROWS:
        return f"new rows of {table}"
    if column == DELETED_ROWS:
        return f"deleted rows of {table}"
    return f"{table}.{column}"


def install(guard: Guard) -> list[tuple[Any, str, Any]]:
    """Listen everywhere a write can start; the (target, event, fn) to remove afterwards."""
    from sqlalchemy import Engine, event, inspect
    from sqlalchemy.orm import Session

    import app.models  # noqa: F401  every mapper known
    from app.orm_base import Base

    listeners: list[tuple[Any, str, Any]] = []

    def on_set(column: str) -> Any:
        def listener(state: Any, _value: Any, _old: Any, _initiator: Any) -> None:
            if state.session_id is None:  # not in a session yet: its add is the write
                return
            guard.check(writer(sys._getframe(1)), state.mapper.local_table.name, [column])

        return listener

    def on_add(_session: Session, instance: Any) -> None:
        table = inspect(instance).mapper.local_table.name
        guard.check(writer(sys._getframe(1)), table, [NEW_ROWS])

    def on_cursor(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        head = statement.lstrip()[:7].upper()
        if not head.startswith(("INSERT", "UPDATE", "DELETE", "REPLACE", "WITH")):
            return
        frame = sys._getframe(1)
        if _in_flush(frame) or (found := written_by(statement)) is None:
            return
        guard.check(writer(frame), *found)

    for mapper in Base.registry.mappers:
        for prop in mapper.column_attrs:
            column = prop.columns[0]
            attribute = getattr(mapper.class_, prop.key)

            listener = on_set(column.name)
            event.listen(attribute, "set", listener, raw=True)
            listeners.append((attribute, "set", listener))
    for target, name, fn in (
        (Session, "transient_to_pending", on_add),
        (Engine, "before_cursor_execute", on_cursor),
    ):
        event.listen(target, name, fn)
        listeners.append((target, name, fn))

    original_delete = Session.delete

    def delete(self: Session, instance: object) -> None:
        table = inspect(instance).mapper.local_table.name
        guard.check(writer(sys._getframe(1)), table, [DELETED_ROWS])
        original_delete(self, instance)

    Session.delete = delete  # type: ignore[method-assign]
    listeners.append((Session, "delete", original_delete))
    return listeners


def uninstall(listeners: list[tuple[Any, str, Any]]) -> None:
    from sqlalchemy import event

    for target, name, fn in listeners:
        if name == "delete":
            target.delete = fn
        else:
            event.remove(target, name, fn)


# --- the plugin ---------------------------------------------------------------------------

_guard: Guard | None = None
_listeners: list[tuple[Any, str, Any]] = []


def active_guard() -> Guard:
    assert _guard is not None, "tests/table_owners.py is not installed (tests/conftest.py)"
    return _guard


def load_owners() -> Owners:
    return parse_owners(DOC.read_text(encoding="utf-8"))


def pytest_sessionstart(session: pytest.Session) -> None:
    global _guard
    import app.models  # noqa: F401  every table known
    from app.orm_base import Base

    _guard = Guard(load_owners(), set(Base.metadata.tables))
    if os.environ.get(RECORD_ENV):
        _guard.record = set()
    _listeners.extend(install(_guard))


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _guard is not None and _guard.record is not None:
        with open(os.environ[RECORD_ENV], "a", encoding="utf-8") as out:
            out.writelines(" ".join(w) + "\n" for w in sorted(_guard.record))
    uninstall(_listeners)
    _listeners.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    guard = active_guard()
    guard.take()
    result = yield
    if found := guard.take():
        raise OwnershipError(
            "a table written by a module that does not own it:\n" + "\n".join(found)
        )
    return result
