"""The one tokenizer of torchyard's filter languages: the runs filter
(app/runs/query/filter_lang.py: the API's ``filter=``, the CLI's ``--filter``, the runs table's
box) and MLflow's search grammar (app/mlflow/search.py: ``filter_string`` and the experiments' name
filter). Both read words, quoted strings, comparison operators, brackets and commas; a ``Lexicon``
says which characters make a word, which quotes a string, which operators exist, and which quotes
may wrap part of a word (MLflow's ``metrics.`val/acc```). Words of a language (``and``, ``in``,
``like``) are words here; the parser (app/filter_grammar.py) decides what they mean.

A string's backslash escapes the next character (``'it\\'s'``); a token's ``text`` is the
string without its quotes and escapes, and ``pos`` is the characters before it (0: the first).
Text it cannot read is a ``TokenError`` with the position and a reason the surface words its
own way (the runs filter: ``position 12: ...``; MLflow: ``Invalid filter string at ...``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

TokenKind = Literal["word", "string", "op", "(", ")", ",", "end"]


@dataclass(frozen=True)
class Token:
    kind: TokenKind
    text: str
    pos: int

    def shown(self) -> str:
        return "the end" if self.kind == "end" else repr(self.text)


@dataclass(frozen=True)
class Lexicon:
    """What one language's tokens are made of."""

    operators: tuple[str, ...]
    string_quotes: str
    word_char: Callable[[str], bool]
    word_quotes: str = ""  # a quote that wraps part of a word (kept in the word, verbatim)


class TokenError(Exception):
    """Text the lexicon cannot read. reason: ``unclosed`` (a string's quote), ``operator``
    (a character that starts an operator but makes none: ``!``), ``char`` (anything else)."""

    def __init__(self, pos: int, reason: Literal["unclosed", "operator", "char"], message: str):
        super().__init__(message)
        self.pos = pos
        self.reason = reason


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
    raise TokenError(start, "unclosed", f"the quote {quote} here is never closed")


def _word_end(text: str, i: int, lexicon: Lexicon) -> int:
    while i < len(text):
        char = text[i]
        if char in lexicon.word_quotes:
            close = text.find(char, i + 1)
            if close < 0:
                raise TokenError(i, "unclosed", f"the quote {char} here is never closed")
            i = close + 1
        elif lexicon.word_char(char):
            i += 1
        else:
            break
    return i


def tokens(text: str, lexicon: Lexicon) -> list[Token]:
    """The words, strings, operators and brackets of ``text``, then an end token."""
    starts = {op[0] for op in lexicon.operators}
    found: list[Token] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char.isspace():
            i += 1
        elif char in "(),":
            found.append(Token(char, char, i))  # type: ignore[arg-type]
            i += 1
        elif char in lexicon.string_quotes:
            value, end = _string(text, i)
            found.append(Token("string", value, i))
            i = end
        elif char in starts:
            op = max((o for o in lexicon.operators if text.startswith(o, i)), key=len, default="")
            if not op:
                shown = ", ".join(lexicon.operators)
                raise TokenError(i, "operator", f"{char!r} is not an operator: use {shown}")
            found.append(Token("op", op, i))
            i += len(op)
        else:
            end = _word_end(text, i, lexicon)
            if end == i:
                raise TokenError(i, "char", f"{char!r} cannot be read here")
            found.append(Token("word", text[i:end], i))
            i = end
    found.append(Token("end", "", len(text)))
    return found
