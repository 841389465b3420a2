"""Tokeniser for CQL: identifiers, quoted identifiers, literals, markers, symbols.

Comments (`--`, `//`, `/* */`) and whitespace are skipped. Keywords are not
special here: the parser matches unquoted identifiers case-insensitively, so a
quoted "select" stays an identifier.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import SyntaxError_

# kinds: ident, qident, string, int, float, uuid, blob, marker, named_marker, symbol, eof


@dataclass(frozen=True)
class Token:
    kind: str
    text: str  # normalised value (lower-cased ident, unescaped string, ...)
    pos: int
    raw: str = ""


_SPEC = [
    ("ws", r"\s+|--[^\n]*|//[^\n]*|/\*.*?\*/"),
    ("uuid", r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?![0-9A-Za-z_])"),
    ("blob", r"0[xX][0-9a-fA-F]*"),
    ("float", r"-?(?:\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|NaN\b|Infinity\b)"),
    ("int", r"-?\d+"),
    ("ident", r"[A-Za-z][A-Za-z0-9_]*"),
    ("qident", r'"(?:[^"]|"")*"'),
    ("string", r"'(?:[^']|'')*'|\$\$.*?\$\$"),
    ("named_marker", r":[A-Za-z_][A-Za-z0-9_]*"),
    ("symbol", r"<=|>=|!=|[(),;.=<>?*{}\[\]:+-]"),
]
_REGEX = re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in _SPEC), re.DOTALL)


def tokenize(query: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while pos < len(query):
        match = _REGEX.match(query, pos)
        if match is None:
            raise SyntaxError_(f"line 1:{pos} token recognition error at: '{query[pos]}'")
        kind = match.lastgroup or ""
        raw = match.group()
        pos = match.end()
        if kind == "ws":
            continue
        if kind == "ident":
            tokens.append(Token("ident", raw.lower(), match.start(), raw))
        elif kind == "qident":
            tokens.append(Token("qident", raw[1:-1].replace('""', '"'), match.start(), raw))
        elif kind == "string":
            text = raw[2:-2] if raw.startswith("$$") else raw[1:-1].replace("''", "'")
            tokens.append(Token("string", text, match.start(), raw))
        elif kind == "named_marker":
            tokens.append(Token("named_marker", raw[1:].lower(), match.start(), raw))
        elif kind == "symbol" and raw == "?":
            tokens.append(Token("marker", "?", match.start(), raw))
        else:
            tokens.append(Token(kind, raw, match.start(), raw))
    tokens.append(Token("eof", "", len(query), "<EOF>"))
    return tokens
