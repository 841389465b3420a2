"""CQL text -> syntax tree (lexer, AST dataclasses, parser)."""

from . import ast
from .parser import parse

__all__ = ["ast", "parse"]
