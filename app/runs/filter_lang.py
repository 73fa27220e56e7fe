"""The runs filter language: one parser for the API (``filter=``), the CLI (``--filter``, sent
as it is) and the runs table (design.md "The workbench at team scale"). Pure: text in, a tree
out; app/runs/filter_sql.py turns the tree into SQL.

    filter     := or
    or         := and ("or" and)*
    and        := atom ("and" atom)*
    atom       := "(" or ")" | key op value | key "in" "(" value ("," value)* ")"
    op         := = == != > >= < <= ~

The tokens are app/filter_tokens.py's (shared with MLflow's search grammar). A key or a
value is a bare word (anything but spaces and ``( ) , = ! < > ~ ' "``: so
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

from app import filter_tokens
from app.errors import Invalid
from app.filter_tokens import Lexicon, Token, TokenError

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


class FilterError(Exception):
    """Text the language cannot read: where, and what was expected there."""

    def __init__(self, pos: int, message: str) -> None:
        super().__init__(f"position {pos}: {message}")
        self.pos = pos


def _keyword(token: Token) -> str | None:
    low = token.text.lower()
    return low if token.kind == "word" and low in ("and", "or", "in") else None


def _word_char(char: str) -> bool:
    return not char.isspace() and char not in _SPECIAL


LEXICON = Lexicon(operators=OPS, string_quotes="'\"", word_char=_word_char)


def tokens(text: str) -> list[Token]:
    """The words, strings, operators and brackets of ``text`` (app.filter_tokens), then an end
    token; FilterError where it cannot be read."""
    try:
        return filter_tokens.tokens(text, LEXICON)
    except TokenError as exc:
        message = f"{exc} or in" if exc.reason == "operator" else str(exc)
        raise FilterError(exc.pos, message) from None


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = tokens(text)
        self.at = 0
        self.count = 0

    def peek(self) -> Token:
        return self.tokens[self.at]

    def take(self) -> Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def junction(self, op: Literal["and", "or"], depth: int) -> Node:
        parts = [self.conjunction(depth) if op == "or" else self.atom(depth)]
        while _keyword(self.peek()) == op:
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
        if token.kind not in ("word", "string") or _keyword(token):
            raise FilterError(
                token.pos, f"expected a key (lr, val/acc, name...), found {token.shown()}"
            )
        self.count += 1
        if self.count > MAX_CONDITIONS:
            raise FilterError(token.pos, f"at most {MAX_CONDITIONS} conditions")
        op = self.take()
        if _keyword(op) == "in":
            return Condition(token.text, "in", self.listed(op), token.pos)
        if op.kind != "op":
            raise FilterError(
                op.pos,
                f"expected an operator ({' '.join(OPS)} or in) after {token.text!r}, "
                f"found {op.shown()}",
            )
        return Condition(token.text, op.text, (self.value(op),), token.pos)

    def value(self, after: Token) -> Value:
        token = self.take()
        if token.kind == "string":
            return Value(token.text, quoted=True)
        if token.kind == "word" and not _keyword(token):
            return Value(token.text)
        raise FilterError(token.pos, f"expected a value after {after.text!r}")

    def listed(self, keyword: Token) -> tuple[Value, ...]:
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
