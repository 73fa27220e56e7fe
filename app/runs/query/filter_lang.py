"""The runs filter language: one parser for the API (``filter=``), the CLI (``--filter``, sent
as it is) and the runs table (design.md "The workbench at team scale"). Pure: text in, a tree
out; app/runs/query/filter_sql.py turns the tree into SQL.

    filter     := or
    or         := and ("or" and)*
    and        := atom ("and" atom)*
    atom       := "(" or ")" | key op value | key "in" "(" value ("," value)* ")" | word
    op         := = == != > >= < <= ~

The tokens and the parser are app/filter_tokens.py's and app/filter_grammar.py's (shared with
MLflow's search grammar); this module is the language's ``GRAMMAR`` and its wording. A key or a
value is a bare word (anything but spaces and ``( ) , = ! < > ~ ' "``: so
``val/acc.max``, ``params.lr``, ``1e-3``, ``resnet-50``) or a quoted string ('...' or "...", a
backslash escapes the quote). ``and``, ``or`` and ``in`` are words of the language in any case;
quote a key or a value spelled like one. ``and`` binds tighter than ``or``. A lone word (or
quoted string) is a name search: ``ext-1`` reads as ``name ~ ext-1`` (what a reader types into
a table's box first; design.md "A plain word in a filter searches names").

What a key means is the compiler's business. The parser only refuses text it cannot read, with
the position (characters before the fault, so 0 is the first character) and what it expected
there: ``position 12: expected a value after '>'``. Why positions and not "cannot read": a
filter typed in a table's box is one line, and the place is what the reader needs.
"""

from __future__ import annotations

from app import filter_grammar
from app.errors import Invalid
from app.filter_grammar import Condition, Grammar, GrammarError, Junction, Node, Value
from app.filter_tokens import Lexicon

__all__ = ["Condition", "FilterError", "Junction", "Node", "Value", "parse", "parse_query"]

OPS = ("=", "==", "!=", ">", ">=", "<", "<=", "~")
MAX_CONDITIONS = 50
MAX_DEPTH = 20  # nested parentheses; deeper is refused long before Python's recursion limit
_SPECIAL = set("()=!<>~,'\"")


class FilterError(Exception):
    """Text the language cannot read: where, and what was expected there."""

    def __init__(self, pos: int, message: str) -> None:
        super().__init__(f"position {pos}: {message}")
        self.pos = pos


def _word_char(char: str) -> bool:
    return not char.isspace() and char not in _SPECIAL


LEXICON = Lexicon(operators=OPS, string_quotes="'\"", word_char=_word_char)
GRAMMAR = Grammar(
    lexicon=LEXICON,
    junctions=("or", "and"),
    word_ops=(("in", "in"),),
    list_ops=frozenset({"in"}),
    groups=True,
    quoted_keys=True,
    reserved=True,
    max_depth=MAX_DEPTH,
    max_terms=MAX_CONDITIONS,
    bare=("name", "~"),
)


def _token_wording(reason: str, message: str) -> str:
    # the tokenizer lists the operator tokens; ``in`` is an operator here too
    return f"{message} or in" if reason == "operator" else message


def _wording(exc: GrammarError) -> str:
    """The language's words for a grammar error (the position goes in front)."""
    found, after = exc.found.shown(), exc.after.text if exc.after else ""
    match exc.reason:
        case "unclosed" | "operator" | "char":
            return _token_wording(exc.reason, str(exc))
        case "depth":
            return f"at most {MAX_DEPTH} parentheses inside each other"
        case "terms":
            return f"at most {MAX_CONDITIONS} conditions"
        case "key":
            return f"expected a key (lr, val/acc, name...), found {found}"
        case "comparator":
            return f"expected an operator ({' '.join(OPS)} or in) after {after!r}, found {found}"
        case "value":
            return f"expected a value after {after!r}"
        case "list_open":
            return "expected '(' after 'in', as in: lr in (0.1, 0.01)"
        case "list_sep":
            return f"expected ',' or ')' in the list of 'in', found {found}"
        case "close":
            pos = exc.after.pos if exc.after else 0
            return f"expected ')' to close the '(' at position {pos}, found {found}"
        case "rest":
            return f"expected 'and', 'or' or the end, found {found}"
        case "length":
            return str(exc)


def parse(text: str) -> Node | None:
    """The tree of ``text`` (None when it holds no condition); FilterError where it cannot be
    read."""
    try:
        return filter_grammar.parse(text, GRAMMAR)
    except GrammarError as exc:
        raise FilterError(exc.pos, _wording(exc)) from None


def parse_query(text: str) -> Node | None:
    """``parse`` for a query parameter: a 422 at ``filter`` naming the position."""
    try:
        return parse(text)
    except FilterError as exc:
        raise Invalid.at(["query", "filter"], str(exc), text) from None
