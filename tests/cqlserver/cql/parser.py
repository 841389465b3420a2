"""Recursive-descent parser for the CQL subset (see README for the grammar covered).

Anything outside the subset raises `SyntaxError_` (code 0x2000) with a message
in the style of Cassandra's ANTLR errors, never a Python exception.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import SyntaxError_
from . import ast
from .lexer import Token, tokenize

_TYPE_WORDS = {"frozen", "list", "set", "map", "tuple"}


class _Parser:
    def __init__(self, query: str) -> None:
        self.tokens = tokenize(query)
        self.pos = 0
        self.markers = 0

    # -- token helpers -------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def peek(self, offset: int = 1) -> Token:
        return self.tokens[min(self.pos + offset, len(self.tokens) - 1)]

    def error(self, expected: str | None = None) -> SyntaxError_:
        tok = self.tok
        where = f"line 1:{tok.pos}"
        if tok.kind == "eof":
            return SyntaxError_(f"{where} mismatched input '<EOF>' expecting {expected or 'more input'}")
        if expected:
            return SyntaxError_(f"{where} mismatched input '{tok.raw}' expecting {expected}")
        return SyntaxError_(f"{where} no viable alternative at input '{tok.raw}'")

    def advance(self) -> Token:
        tok = self.tok
        if tok.kind != "eof":
            self.pos += 1
        return tok

    def is_kw(self, *words: str) -> bool:
        return self.tok.kind == "ident" and self.tok.text in words

    def accept_kw(self, *words: str) -> bool:
        for i, word in enumerate(words):
            tok = self.peek(i)
            if tok.kind != "ident" or tok.text != word:
                return False
        self.pos += len(words)
        return True

    def expect_kw(self, *words: str) -> None:
        for word in words:
            if not self.accept_kw(word):
                raise self.error(word.upper())

    def accept_sym(self, sym: str) -> bool:
        if self.tok.kind == "symbol" and self.tok.text == sym:
            self.pos += 1
            return True
        return False

    def expect_sym(self, sym: str) -> None:
        if not self.accept_sym(sym):
            raise self.error(f"'{sym}'")

    def ident(self) -> str:
        if self.tok.kind in ("ident", "qident"):
            return self.advance().text
        raise self.error("an identifier")

    def table_name(self) -> ast.TableName:
        first = self.ident()
        if self.accept_sym("."):
            return ast.TableName(first, self.ident())
        return ast.TableName(None, first)

    def comma_list(self, item: Callable[[], Any]) -> list[Any]:
        items = [item()]
        while self.accept_sym(","):
            items.append(item())
        return items

    # -- terms ---------------------------------------------------------
    def term(self) -> ast.Term:
        tok = self.tok
        if tok.kind == "marker":
            self.advance()
            return self._marker(None)
        if tok.kind == "named_marker":
            self.advance()
            return self._marker(tok.text)
        return self.literal()

    def _marker(self, name: str | None) -> ast.Marker:
        marker = ast.Marker(self.markers, name)
        self.markers += 1
        return marker

    def literal(self) -> ast.Literal:
        tok = self.tok
        if tok.kind == "string":
            self.advance()
            return ast.Literal("string", tok.text)
        if tok.kind == "int":
            self.advance()
            return ast.Literal("int", int(tok.text))
        if tok.kind == "float":
            self.advance()
            return ast.Literal("float", float(tok.text))
        if tok.kind == "uuid":
            self.advance()
            return ast.Literal("uuid", tok.text)
        if tok.kind == "blob":
            self.advance()
            hex_digits = tok.text[2:]
            if len(hex_digits) % 2:
                raise SyntaxError_(f"Invalid hex literal {tok.text}")
            return ast.Literal("blob", bytes.fromhex(hex_digits))
        if tok.kind == "ident" and tok.text in ("true", "false"):
            self.advance()
            return ast.Literal("bool", tok.text == "true")
        if tok.kind == "ident" and tok.text == "null":
            self.advance()
            return ast.Literal("null", None)
        if tok.kind == "symbol" and tok.text == "{":
            return self.brace_literal()
        if tok.kind == "symbol" and tok.text == "[":
            self.advance()
            items: list[Any] | None = [] if self.accept_sym("]") else None
            if items is None:
                items = self.comma_list(self._const)
                self.expect_sym("]")
            return ast.Literal("list", items)
        raise self.error()

    def _const(self) -> tuple[str, Any]:
        lit = self.literal()
        return (lit.kind, lit.value)

    def brace_literal(self) -> ast.Literal:
        self.expect_sym("{")
        if self.accept_sym("}"):
            return ast.Literal("set", [])
        first = self._const()
        if self.accept_sym(":"):
            pairs = [(first, self._const())]
            while self.accept_sym(","):
                key = self._const()
                self.expect_sym(":")
                pairs.append((key, self._const()))
            self.expect_sym("}")
            return ast.Literal("map", pairs)
        items = [first]
        while self.accept_sym(","):
            items.append(self._const())
        self.expect_sym("}")
        return ast.Literal("set", items)

    # -- shared clauses ------------------------------------------------
    def relation(self, allow_in: bool = True) -> ast.Relation:
        if self.tok.kind == "symbol" and self.tok.text == "(":
            raise SyntaxError_("Multi-column relations are not supported by this test server")
        if self.is_kw("token") and self.peek().text == "(":
            raise SyntaxError_("token() relations are not supported by this test server")
        column = self.ident()
        if allow_in and self.accept_kw("in"):
            if self.tok.kind in ("marker", "named_marker"):
                return ast.Relation(column, "IN", self.term())
            self.expect_sym("(")
            values: tuple[ast.Term, ...] = ()
            if not self.accept_sym(")"):
                values = tuple(self.comma_list(self.term))
                self.expect_sym(")")
            return ast.Relation(column, "IN", values)
        tok = self.tok
        if tok.kind == "symbol" and tok.text in ("=", "<", "<=", ">", ">=", "!="):
            self.advance()
            return ast.Relation(column, tok.text, self.term())
        if self.is_kw("contains", "like"):
            raise SyntaxError_(f"{tok.text.upper()} relations are not supported by this test server")
        raise self.error("one of '=', '<', '<=', '>', '>=', '!=', IN")

    def where(self) -> list[ast.Relation]:
        self.expect_kw("where")
        relations = [self.relation()]
        while self.accept_kw("and"):
            relations.append(self.relation())
        return relations

    def using(self) -> tuple[ast.Term | None, ast.Term | None]:
        ttl = timestamp = None
        while True:
            if self.accept_kw("ttl"):
                ttl = self.term()
            elif self.accept_kw("timestamp"):
                timestamp = self.term()
            else:
                raise self.error("TTL or TIMESTAMP")
            if not self.accept_kw("and"):
                return ttl, timestamp

    def conditions(self) -> tuple[bool, list[ast.Relation]]:
        """After IF: `EXISTS` or `cond AND cond ...`."""
        if self.accept_kw("exists"):
            return True, []
        conds = [self.relation()]
        while self.accept_kw("and"):
            conds.append(self.relation())
        return False, conds

    # -- statements ----------------------------------------------------
    def statement(self) -> ast.Statement:
        if self.accept_kw("select"):
            return self.select()
        if self.accept_kw("insert"):
            return self.insert()
        if self.accept_kw("update"):
            return self.update()
        if self.accept_kw("delete"):
            return self.delete()
        if self.accept_kw("begin"):
            return self.batch()
        if self.accept_kw("use"):
            return ast.Use(self.ident())
        if self.accept_kw("truncate"):
            self.accept_kw("table")
            return ast.Truncate(self.table_name())
        if self.accept_kw("create"):
            if self.accept_kw("keyspace") or self.accept_kw("schema"):
                return self.create_keyspace()
            if self.accept_kw("table") or self.accept_kw("columnfamily"):
                return self.create_table()
            raise SyntaxError_(f"CREATE {self.tok.raw.upper()} is not supported by this test server")
        if self.accept_kw("drop"):
            if self.accept_kw("keyspace") or self.accept_kw("schema"):
                if_exists = self.accept_kw("if", "exists")
                return ast.DropKeyspace(self.ident(), if_exists)
            if self.accept_kw("table") or self.accept_kw("columnfamily"):
                if_exists = self.accept_kw("if", "exists")
                return ast.DropTable(self.table_name(), if_exists)
            raise SyntaxError_(f"DROP {self.tok.raw.upper()} is not supported by this test server")
        raise self.error()

    def select(self) -> ast.Select:
        distinct = self.accept_kw("distinct")
        selectors: list[ast.Selector] | None
        selectors = None if self.accept_sym("*") else self.comma_list(self.selector)
        self.expect_kw("from")
        stmt = ast.Select(self.table_name(), selectors, distinct=distinct)
        if self.is_kw("where"):
            stmt.where = self.where()
        if self.accept_kw("order", "by"):
            stmt.order_by = self.comma_list(self.ordering)
        if self.accept_kw("per", "partition", "limit"):
            raise SyntaxError_("PER PARTITION LIMIT is not supported by this test server")
        if self.accept_kw("limit"):
            stmt.limit = self.term()
        if self.accept_kw("allow", "filtering"):
            stmt.allow_filtering = True
        return stmt

    def selector(self) -> ast.Selector:
        if self.tok.kind == "ident" and self.peek().kind == "symbol" and self.peek().text == "(":
            function = self.advance().text
            self.expect_sym("(")
            if function == "count":
                if not (self.accept_sym("*") or (self.tok.kind == "int" and self.advance())):
                    self.ident()
                self.expect_sym(")")
                selector = ast.Selector(None, "count")
            elif function in ("ttl", "writetime"):
                selector = ast.Selector(self.ident(), function)
                self.expect_sym(")")
            else:
                raise SyntaxError_(f"Function {function}() is not supported by this test server")
        else:
            selector = ast.Selector(self.ident())
        if self.accept_kw("as"):
            return ast.Selector(selector.column, selector.function, self.ident())
        return selector

    def ordering(self) -> tuple[str, bool]:
        column = self.ident()
        if self.accept_kw("desc"):
            return column, False
        self.accept_kw("asc")
        return column, True

    def insert(self) -> ast.Insert:
        self.expect_kw("into")
        table = self.table_name()
        if self.is_kw("json"):
            raise SyntaxError_("INSERT JSON is not supported by this test server")
        self.expect_sym("(")
        columns = self.comma_list(self.ident)
        self.expect_sym(")")
        self.expect_kw("values")
        self.expect_sym("(")
        values = self.comma_list(self.term)
        self.expect_sym(")")
        stmt = ast.Insert(table, columns, values)
        for _ in range(2):  # IF NOT EXISTS and USING in either order
            if self.accept_kw("if", "not", "exists"):
                stmt.if_not_exists = True
            elif self.accept_kw("using"):
                stmt.ttl, stmt.timestamp = self.using()
        if len(columns) != len(values):
            raise SyntaxError_("Unmatched column names/values")
        return stmt

    def update(self) -> ast.Update:
        table = self.table_name()
        ttl = timestamp = None
        if self.accept_kw("using"):
            ttl, timestamp = self.using()
        self.expect_kw("set")
        assignments = self.comma_list(self.assignment)
        stmt = ast.Update(table, assignments, self.where(), ttl=ttl, timestamp=timestamp)
        if self.accept_kw("if"):
            stmt.if_exists, stmt.conditions = self.conditions()
        return stmt

    def assignment(self) -> tuple[str, ast.Term]:
        column = self.ident()
        if self.accept_sym("["):
            raise SyntaxError_("Collection element assignments are not supported by this test server")
        self.expect_sym("=")
        value = self.term()
        if self.tok.kind == "symbol" and self.tok.text in ("+", "-"):
            raise SyntaxError_("Counter and collection arithmetic is not supported by this test server")
        return column, value

    def delete(self) -> ast.Delete:
        columns: list[str] = []
        if not self.is_kw("from"):
            columns = self.comma_list(self.ident)
        self.expect_kw("from")
        table = self.table_name()
        timestamp = None
        if self.accept_kw("using"):
            ttl, timestamp = self.using()
            if ttl is not None:
                raise SyntaxError_("TTL is not allowed on DELETE statements")
        stmt = ast.Delete(table, columns, self.where(), timestamp=timestamp)
        if self.accept_kw("if"):
            stmt.if_exists, stmt.conditions = self.conditions()
        return stmt

    def batch(self) -> ast.Batch:
        kind = "LOGGED"
        if self.accept_kw("unlogged"):
            kind = "UNLOGGED"
        elif self.accept_kw("counter"):
            kind = "COUNTER"
        else:
            self.accept_kw("logged")
        self.expect_kw("batch")
        timestamp = None
        if self.accept_kw("using"):
            ttl, timestamp = self.using()
            if ttl is not None:
                raise SyntaxError_("TTL is not allowed on BATCH statements")
        statements: list[ast.Modification] = []
        while not self.accept_kw("apply", "batch"):
            if self.accept_kw("insert"):
                statements.append(self.insert())
            elif self.accept_kw("update"):
                statements.append(self.update())
            elif self.accept_kw("delete"):
                statements.append(self.delete())
            else:
                raise self.error("INSERT, UPDATE, DELETE or APPLY BATCH")
            while self.accept_sym(";"):
                pass
        return ast.Batch(kind, statements, timestamp)

    def create_keyspace(self) -> ast.CreateKeyspace:
        if_not_exists = self.accept_kw("if", "not", "exists")
        name = self.ident()
        self.expect_kw("with")
        replication: dict[str, str] | None = None
        durable = True
        while True:
            option = self.ident()
            self.expect_sym("=")
            value = self.literal()
            if option == "replication":
                if value.kind != "map":
                    raise SyntaxError_("replication must be a map literal")
                replication = {str(k[1]): str(v[1]) for k, v in value.value}
            elif option == "durable_writes":
                durable = bool(value.value) if value.kind == "bool" else str(value.value).lower() == "true"
            else:
                raise SyntaxError_(f"Unknown keyspace property '{option}'")
            if not self.accept_kw("and"):
                break
        if replication is None:
            raise SyntaxError_("Missing mandatory option 'replication'")
        return ast.CreateKeyspace(name, replication, durable, if_not_exists)

    def create_table(self) -> ast.CreateTable:
        if_not_exists = self.accept_kw("if", "not", "exists")
        table = self.table_name()
        self.expect_sym("(")
        columns: list[ast.ColumnDef] = []
        partition_key: list[str] = []
        clustering: list[str] = []
        while True:
            if self.accept_kw("primary", "key"):
                if partition_key:
                    raise SyntaxError_("Multiple PRIMARY KEYs specified (exactly one required)")
                partition_key, clustering = self.primary_key()
            else:
                name = self.ident()
                column = ast.ColumnDef(name, self.type_text())
                if self.accept_kw("static"):
                    column.static = True
                if self.accept_kw("primary", "key"):
                    if partition_key:
                        raise SyntaxError_("Multiple PRIMARY KEYs specified (exactly one required)")
                    partition_key = [name]
                columns.append(column)
            if not self.accept_sym(","):
                break
            if self.tok.kind == "symbol" and self.tok.text == ")":
                break
        self.expect_sym(")")
        stmt = ast.CreateTable(table, columns, partition_key, clustering, if_not_exists=if_not_exists)
        if self.accept_kw("with"):
            while True:
                if self.accept_kw("clustering", "order", "by"):
                    self.expect_sym("(")
                    stmt.clustering_order = dict(self.comma_list(self.ordering))
                    self.expect_sym(")")
                elif self.accept_kw("compact", "storage"):
                    raise SyntaxError_("COMPACT STORAGE tables are not supported")
                else:
                    option = self.ident()
                    self.expect_sym("=")
                    stmt.options[option] = self.literal().value
                if not self.accept_kw("and"):
                    break
        if not partition_key:
            raise SyntaxError_("No PRIMARY KEY specifed (exactly one required)")
        return stmt

    def primary_key(self) -> tuple[list[str], list[str]]:
        self.expect_sym("(")
        if self.accept_sym("("):
            partition = self.comma_list(self.ident)
            self.expect_sym(")")
        else:
            partition = [self.ident()]
        clustering: list[str] = []
        while self.accept_sym(","):
            clustering.append(self.ident())
        self.expect_sym(")")
        return partition, clustering

    def type_text(self) -> str:
        """Collect a type expression such as frozen<map<text, int>> as text."""
        parts = [self.ident()]
        if parts[0] in _TYPE_WORDS and self.accept_sym("<"):
            depth = 1
            parts.append("<")
            while depth:
                tok = self.advance()
                if tok.kind == "eof":
                    raise self.error("'>'")
                if tok.text == "<":
                    depth += 1
                elif tok.text == ">":
                    depth -= 1
                parts.append(tok.text if tok.kind != "qident" else tok.raw)
        return "".join(parts)


def parse(query: str) -> ast.Parsed:
    """Parse one CQL statement (an optional trailing ';' is allowed)."""
    parser = _Parser(query)
    statement = parser.statement()
    while parser.accept_sym(";"):
        pass
    if parser.tok.kind != "eof":
        raise parser.error("EOF")
    return ast.Parsed(statement, parser.markers)
