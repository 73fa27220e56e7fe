"""The one parser of torchyard's filter languages: the runs filter (app/runs/query/filter_lang.py)
and MLflow's search grammar (app/mlflow/search.py: ``filter_string`` and the experiments' name
filter). Both read conditions joined by junction words; a ``Grammar`` says what differs:

    filter     := level[0]
    level[i]   := level[i+1] (junctions[i] level[i+1])*     junctions loosest first
    level[n]   := "(" level[0] ")"                          only where groups are allowed
                | key op value | key list_op "(" value ("," value)* ")"
    op         := an operator token of the lexicon | a word operator (``like``, ``not in``)

The runs filter is ``or`` over ``and`` with parentheses and ``in``; MLflow's is ``and`` alone,
with ``LIKE ILIKE IN NOT IN``. Words (junctions, word operators) are read in any case. The
tokens are app/filter_tokens.py's, under the grammar's lexicon.

The parser builds one tree both sides consume (``Condition``, ``Junction``; what a key means is
each compiler's business) and refuses text with one error, ``GrammarError``: a reason code,
the position (characters before the fault, 0 the first) and the token found there, which each
surface words its own way (the runs filter: ``position 12: expected a value after '>'``;
MLflow: ``Invalid filter: expected AND, got 'OR'``). Why codes and not messages here: the two
surfaces' wordings are part of their contracts (the runs table shows the position, MLflow's
clients match MLflow's phrases), and one parser should not have to know either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.filter_tokens import Lexicon, Token, TokenError, tokens

JunctionWord = Literal["and", "or"]
Reason = Literal[
    # the tokenizer's (app.filter_tokens.TokenError): an unclosed quote, a character that
    # starts an operator but makes none, a character no token takes
    "unclosed",
    "operator",
    "char",
    # the parser's
    "length",  # the text is longer than max_length (pos: the first character past it)
    "depth",  # a "(" nested deeper than max_depth
    "terms",  # more conditions than max_terms (at the key of the first one too many)
    "key",  # a key was expected (found: what is there instead)
    "comparator",  # an operator was expected after the key (after: the key)
    "value",  # a value was expected (after: the operator, "(" or "," before it)
    "list_open",  # "(" was expected after a list operator (after: the operator)
    "list_sep",  # "," or ")" was expected in a list (after: the list's "(")
    "close",  # ")" was expected to close a group (after: the group's "(")
    "rest",  # a junction word or the end was expected
]

TOKEN_REASONS = frozenset({"unclosed", "operator", "char"})  # the tokenizer's faults


@dataclass(frozen=True)
class Value:
    """A value as written: its text, and whether it was quoted (a quoted value is text even
    when it spells a number)."""

    text: str
    quoted: bool = False


@dataclass(frozen=True)
class Condition:
    """``key op value``, or ``key op (values)`` for a list operator; op is the grammar's name
    for the operator (``>=``, ``in``, ``NOT IN``); pos: where the key starts."""

    key: str
    op: str
    values: tuple[Value, ...]
    pos: int


@dataclass(frozen=True)
class Junction:
    """Conditions joined by one junction word (at least two parts)."""

    op: JunctionWord
    parts: tuple[Node, ...]


Node = Condition | Junction


@dataclass(frozen=True)
class Grammar:
    """What one filter language is made of, beyond its tokens."""

    lexicon: Lexicon
    junctions: tuple[JunctionWord, ...]  # loosest first: ("or", "and") reads a or b and c
    # word operators: (how it is spelled, lowercase words split by one space; its name in the
    # tree), as (("not in", "NOT IN"),); the lexicon's operator tokens are their own names
    word_ops: tuple[tuple[str, str], ...]
    list_ops: frozenset[str]  # the names of the operators that take a list: in, NOT IN
    trailing_comma: bool = False  # a list may end with a comma: in ('a',)
    groups: bool = False  # parentheses group conditions
    quoted_keys: bool = False  # a key may be a quoted string ("my key" = 1)
    # junction and operator words are no key and no bare value (quote one spelled like them)
    reserved: bool = False
    max_length: int | None = None
    max_depth: int = 0  # parentheses inside each other (groups only)
    max_terms: int | None = None
    # a lone key (no operator after it: the end, a junction or ")") stands for the condition
    # (key, op) with it as the value: the runs filter reads ``ext-1`` as ``name ~ ext-1``
    bare: tuple[str, str] | None = None

    def words(self) -> frozenset[str]:
        """The words this grammar reads as junctions or the start of an operator."""
        return frozenset(self.junctions) | {spelled.split()[0] for spelled, _ in self.word_ops}


class GrammarError(Exception):
    """Text a grammar cannot read: ``reason`` (a ``Reason``), ``pos``, ``found`` (the token at
    the fault; for the tokenizer's faults, the character there as a word) and ``after`` (the
    token the expectation comes from, as the reasons above say). The message is plain English
    for logs and tests; a surface words the error itself from the fields."""

    def __init__(
        self, reason: Reason, found: Token, message: str, *, after: Token | None = None
    ) -> None:
        super().__init__(message)
        self.reason: Reason = reason
        self.pos = found.pos
        self.found = found
        self.after = after


def _lower(token: Token) -> str | None:
    return token.text.lower() if token.kind == "word" else None


class _Parser:
    def __init__(self, text: str, grammar: Grammar) -> None:
        self.grammar = grammar
        self.words = grammar.words()
        # longest spelling first, so "not in" is tried before a "not" of its own
        self.word_ops = sorted(
            ((spelled.split(), name) for spelled, name in grammar.word_ops),
            key=lambda op: -len(op[0]),
        )
        self.at = 0
        self.terms = 0
        limit = grammar.max_length
        if limit is not None and len(text) > limit:
            raise GrammarError(
                "length", Token("word", text[limit], limit), f"at most {limit} characters"
            )
        try:
            self.tokens = tokens(text, grammar.lexicon)
        except TokenError as exc:
            raise GrammarError(
                exc.reason, Token("word", text[exc.pos], exc.pos), str(exc)
            ) from None

    def peek(self, ahead: int = 0) -> Token:
        return self.tokens[min(self.at + ahead, len(self.tokens) - 1)]

    def take(self) -> Token:
        token = self.peek()
        self.at = min(self.at + 1, len(self.tokens) - 1)
        return token

    def is_word(self, token: Token) -> bool:
        """A bare word this grammar reads as itself (not reserved)."""
        return token.kind == "word" and not (
            self.grammar.reserved and token.text.lower() in self.words
        )

    def level(self, i: int, depth: int) -> Node:
        if i == len(self.grammar.junctions):
            return self.atom(depth)
        word = self.grammar.junctions[i]
        parts = [self.level(i + 1, depth)]
        while _lower(self.peek()) == word:
            self.take()
            parts.append(self.level(i + 1, depth))
        return parts[0] if len(parts) == 1 else Junction(word, tuple(parts))

    def atom(self, depth: int) -> Node:
        token = self.take()
        if token.kind == "(" and self.grammar.groups:
            return self.group(token, depth)
        quoted_key = token.kind == "string" and self.grammar.quoted_keys
        if not (quoted_key or self.is_word(token)):
            raise GrammarError("key", token, f"expected a key, found {token.shown()}")
        self.terms += 1
        limit = self.grammar.max_terms
        if limit is not None and self.terms > limit:
            raise GrammarError("terms", token, f"at most {limit} conditions")
        if self.grammar.bare and self.lone():
            key, op = self.grammar.bare
            value = Value(token.text, quoted=token.kind == "string")
            return Condition(key, op, (value,), token.pos)
        op, written = self.operator(token)
        if op in self.grammar.list_ops:
            return Condition(token.text, op, self.listed(written), token.pos)
        return Condition(token.text, op, (self.value(written),), token.pos)

    def lone(self) -> bool:
        """The key just taken has no operator after it."""
        following = self.peek()
        return following.kind in ("end", ")") or _lower(following) in self.grammar.junctions

    def group(self, opening: Token, depth: int) -> Node:
        if depth >= self.grammar.max_depth:
            limit = self.grammar.max_depth
            raise GrammarError("depth", opening, f"at most {limit} parentheses inside each other")
        inner = self.level(0, depth + 1)
        close = self.take()
        if close.kind != ")":
            raise GrammarError(
                "close", close, f"expected ')' for the '(' at {opening.pos}", after=opening
            )
        return inner

    def operator(self, key: Token) -> tuple[str, Token]:
        """The operator's name, and the operator as written (one token, its words joined)."""
        first = self.take()
        if first.kind == "op":
            return first.text, first
        for spelled, name in self.word_ops:
            written = [self.peek(n - 1) for n in range(len(spelled))]  # from the first word
            if [_lower(token) for token in written] == spelled:
                self.at += len(spelled) - 1
                return name, Token("word", " ".join(t.text for t in written), first.pos)
        found = first
        following = self.peek()
        starts = {spelled[0] for spelled, _ in self.word_ops if len(spelled) > 1}
        if _lower(first) in starts and following.kind == "word":
            found = Token("word", f"{first.text} {following.text}", first.pos)
        raise GrammarError(
            "comparator", found, f"expected an operator, found {found.shown()}", after=key
        )

    def value(self, after: Token) -> Value:
        token = self.take()
        if token.kind == "string":
            return Value(token.text, quoted=True)
        if self.is_word(token):
            return Value(token.text)
        raise GrammarError(
            "value",
            token,
            f"expected a value after {after.text!r}, found {token.shown()}",
            after=after,
        )

    def listed(self, op: Token) -> tuple[Value, ...]:
        opening = self.take()
        if opening.kind != "(":
            raise GrammarError(
                "list_open",
                opening,
                f"expected '(' after {op.text!r}, found {opening.shown()}",
                after=op,
            )
        values = [self.value(opening)]
        while True:
            token = self.take()
            if token.kind == ")":
                return tuple(values)
            if token.kind != ",":
                raise GrammarError(
                    "list_sep",
                    token,
                    f"expected ',' or ')', found {token.shown()}",
                    after=opening,
                )
            if self.grammar.trailing_comma and self.peek().kind == ")":
                continue
            values.append(self.value(token))


def parse(text: str, grammar: Grammar) -> Node | None:
    """The tree of ``text`` under ``grammar`` (None when it holds no condition); GrammarError
    where it cannot be read."""
    parser = _Parser(text, grammar)
    if parser.peek().kind == "end":
        return None
    tree = parser.level(0, 0)
    rest = parser.peek()
    if rest.kind != "end":
        raise GrammarError("rest", rest, f"expected a junction or the end, found {rest.shown()}")
    return tree


def conditions(tree: Node | None) -> list[Condition]:
    """The conditions of a tree joined by ``and`` alone (an AND-only grammar's tree), in order;
    ValueError for any other junction (that grammar cannot have read it)."""
    if tree is None:
        return []
    if isinstance(tree, Condition):
        return [tree]
    if tree.op != "and" or not all(isinstance(part, Condition) for part in tree.parts):
        raise ValueError(f"not a conjunction of conditions: {tree!r}")
    return [part for part in tree.parts if isinstance(part, Condition)]
