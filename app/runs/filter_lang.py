"""The runs filter language: one parser for the API (``filter=``), the CLI (``--filter``, sent
as it is) and the runs table (design.md "The workbench at team scale"). Pure: text in, a tree
out; app/runs/filter_sql.py turns the tree into SQL.

    filter     := or
    or         := and ("or" and)*
    and        := atom ("and" atom)*
    atom       := "(" or ")" | key op value | key "in" "(" value ("," value)* ")"
    op         := = == != > >= < <= ~

A key or a value is a bare word (anything but spaces and ``( ) , = ! < > ~ ' "``: so
``val/acc.max``, ``params.lr``, ``1e-3``, ``resnet-50``) or a quoted string ('...' or "...", a
backslash escapes the quote). ``and``, ``or`` and ``in`` are words of the language in any case;
quote a key or a value spelled like one. ``and`` binds tighter than ``or``.

What a key means is the compiler's business. The parser only refuses text it cannot read, with
the position (characters before the fault, so 0 is the first character) and what it expected
there: ``position 12: expected a value after '>'``. Why positions and not "cannot read": a
filter typed in a table's box is one line, and the place is what the reader needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.errors import Invalid

OPS = ("=", "==", "!=", ">", ">=", "<", "<=", "~")
MAX_CONDITIONS = 50
MAX_DEPTH = 20  # nested parentheses; deeper is refused long before Python's recursion limit
_SPECIAL = set("()=!<>~,'\"")


@dataclass(frozen=True)
class Value:
    """A value as written: its text, and whether it was quoted (a quoted value is text even
    when it spells a number)."""

    text: str
    quoted: bool = False


@dataclass(frozen=True)
class Condition:
    """``key op value``, or ``key in (values)`` (op "in"); pos: where the key starts."""

    key: str
    op: str
    values: tuple[Value, ...]
    pos: int


@dataclass(frozen=True)
class Junction:
    """Conditions joined by ``and`` or ``or`` (at least two parts)."""

    op: Literal["and", "or"]
    parts: tuple[Node, ...]


Node = Condition | Junction


@dataclass(frozen=True)
class _Token:
    kind: Literal["word", "string", "op", "(", ")", ",", "end"]
    text: str
    pos: int

    def keyword(self) -> str | None:
        low = self.text.lower()
        return low if self.kind == "word" and low in ("and", "or", "in") else None

    def shown(self) -> str:
        return "the end" if self.kind == "end" else repr(self.text)


class FilterError(Exception):
    """Text the language cannot read: where, and what was expected there."""

    def __init__(self, pos: int, message: str) -> None:
        super().__init__(f"position {pos}: {message}")
        self.pos = pos


def _string(text: str, start: int) -> tuple[str, int]:
    quote, out, i = text[start], [], start + 1
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        if char == quote:
            return "".join(out), i + 1
        out.append(char)
        i += 1
    raise FilterError(start, f"the quote {quote} here is never closed")


def tokens(text: str) -> list[_Token]:
    """The words, strings, operators and brackets of ``text``, then an end token."""
    found: list[_Token] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char.isspace():
            i += 1
        elif char in "(),":
            found.append(_Token(char, char, i))  # type: ignore[arg-type]
            i += 1
        elif char in "'\"":
            value, end = _string(text, i)
            found.append(_Token("string", value, i))
            i = end
        elif char in "=!<>~":
            two = text[i : i + 2]
            op = two if two in OPS else char
            if op not in OPS:
                raise FilterError(i, f"{char!r} is not an operator: use {', '.join(OPS)} or in")
            found.append(_Token("op", op, i))
            i += len(op)
        else:
            end = i
            while end < len(text) and not text[end].isspace() and text[end] not in _SPECIAL:
                end += 1
            found.append(_Token("word", text[i:end], i))
            i = end
    found.append(_Token("end", "", len(text)))
    return found


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = tokens(text)
        self.at = 0
        self.count = 0

    def peek(self) -> _Token:
        return self.tokens[self.at]

    def take(self) -> _Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def junction(self, op: Literal["and", "or"], depth: int) -> Node:
        parts = [self.conjunction(depth) if op == "or" else self.atom(depth)]
        while self.peek().keyword() == op:
            self.take()
            parts.append(self.conjunction(depth) if op == "or" else self.atom(depth))
        return parts[0] if len(parts) == 1 else Junction(op, tuple(parts))

    def conjunction(self, depth: int) -> Node:
        return self.junction("and", depth)

    def atom(self, depth: int) -> Node:
        token = self.take()
        if token.kind == "(":
            if depth >= MAX_DEPTH:
                raise FilterError(token.pos, f"at most {MAX_DEPTH} parentheses inside each other")
            inner = self.junction("or", depth + 1)
            close = self.take()
            if close.kind != ")":
                raise FilterError(
                    close.pos,
                    f"expected ')' to close the '(' at position {token.pos}, found {close.shown()}",
                )
            return inner
        if token.kind not in ("word", "string") or token.keyword():
            raise FilterError(
                token.pos, f"expected a key (lr, val/acc, name...), found {token.shown()}"
            )
        self.count += 1
        if self.count > MAX_CONDITIONS:
            raise FilterError(token.pos, f"at most {MAX_CONDITIONS} conditions")
        op = self.take()
        if op.keyword() == "in":
            return Condition(token.text, "in", self.listed(op), token.pos)
        if op.kind != "op":
            raise FilterError(
                op.pos,
                f"expected an operator ({' '.join(OPS)} or in) after {token.text!r}, "
                f"found {op.shown()}",
            )
        return Condition(token.text, op.text, (self.value(op),), token.pos)

    def value(self, after: _Token) -> Value:
        token = self.take()
        if token.kind == "string":
            return Value(token.text, quoted=True)
        if token.kind == "word" and not token.keyword():
            return Value(token.text)
        raise FilterError(token.pos, f"expected a value after {after.text!r}")

    def listed(self, keyword: _Token) -> tuple[Value, ...]:
        opening = self.take()
        if opening.kind != "(":
            raise FilterError(opening.pos, "expected '(' after 'in', as in: lr in (0.1, 0.01)")
        values = [self.value(opening)]
        while True:
            token = self.take()
            if token.kind == ")":
                return tuple(values)
            if token.kind != ",":
                raise FilterError(
                    token.pos, f"expected ',' or ')' in the list of 'in', found {token.shown()}"
                )
            values.append(self.value(token))


def parse(text: str) -> Node | None:
    """The tree of ``text`` (None when it holds no condition); FilterError where it cannot be
    read."""
    parser = _Parser(text)
    if parser.peek().kind == "end":
        return None
    tree = parser.junction("or", 0)
    rest = parser.peek()
    if rest.kind != "end":
        raise FilterError(rest.pos, f"expected 'and', 'or' or the end, found {rest.shown()}")
    return tree


def parse_query(text: str) -> Node | None:
    """``parse`` for a query parameter: a 422 at ``filter`` naming the position."""
    try:
        return parse(text)
    except FilterError as exc:
        raise Invalid.at(["query", "filter"], str(exc), text) from None
