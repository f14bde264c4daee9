"""T-SQL text to statements: the lark grammar ``tsql.lark`` (LALR) and a transformer to ``nodes``.

A syntax error becomes SQL Server's error 102 ("Incorrect syntax near '...'") with the
line it is on (105 for a string or quoted name left open, 113 for a block comment);
nothing of the batch runs when any part of it does not parse, as in SQL Server, where a
batch is compiled whole before it runs.
"""

from __future__ import annotations

import contextvars
import functools
import math
import re
from decimal import Decimal
from importlib import resources
from typing import Any

from lark import Lark, Token, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from broker.sql import nodes as n
from broker.sql import options, values
from broker.sql.batches import spans
from broker.sql.ddl_syntax import DdlBuild
from broker.sql.errors import SqlError
from broker.sql.syntax import (
    Clause,
    Name,
    ObjectName,
    line_of,
    non_keywords,
    of_type,
    present,
    statement,
    string_text,
    token_kinds,
    unquote,
)

INCORRECT_SYNTAX = 102
NUMBER_OUT_OF_RANGE = 1007
UNEXPECTED_END = 102
UNCLOSED_QUOTATION = 105
MISSING_END_COMMENT = 113
# SQL Server's messages are nvarchar(2047): a long unclosed string is cut to fit.
MESSAGE_ROOM = 1990
_LINE_END = re.compile(r"\r\n|\r|\n")  # the line ends of the batch splitter
_NOT_LINE_BREAK = re.compile(r"[^\r\n]")
NESTED_TOO_DEEPLY = 191
UNKNOWN_TABLE_HINT = 321
HINT_NEEDS_WITH = 1018
# SQL Server's table hints that take no argument. Every read here is a snapshot or runs
# in the script's transaction, which takes no table locks: each is accepted and changes
# nothing (docs/sql.md).
TABLE_HINTS = frozenset({
    "NOLOCK", "READUNCOMMITTED", "READCOMMITTED", "READCOMMITTEDLOCK", "REPEATABLEREAD", "SERIALIZABLE",
    "SNAPSHOT", "HOLDLOCK", "UPDLOCK", "XLOCK", "ROWLOCK", "PAGLOCK", "TABLOCK", "TABLOCKX", "NOWAIT",
    "READPAST", "NOEXPAND", "FORCESEEK", "FORCESCAN",
})
# The hints SQL Server still takes without WITH, one alone: ``FROM t (NOLOCK)``.
HINTS_WITHOUT_WITH = frozenset({
    "NOLOCK", "READUNCOMMITTED", "UPDLOCK", "REPEATABLEREAD", "SERIALIZABLE", "READCOMMITTED", "TABLOCK",
    "TABLOCKX", "PAGLOCK", "ROWLOCK", "NOWAIT", "READPAST", "XLOCK", "SNAPSHOT", "NOEXPAND",
})


# The batch being lexed, for the keyword check below (parsing runs in the caller's thread).
_lexing: contextvars.ContextVar[str] = contextvars.ContextVar("lexing", default="")
_KEYWORD_TERMINAL = re.compile(r'^([A-Z_]+): "[A-Za-z_]+"i$', re.MULTILINE)
# What continues a word: not @, which after a keyword starts a variable (SELECT@@ROWCOUNT).
_IDENTIFIER_CHARACTER = re.compile(r"[\w#$]")


@functools.cache
def _parser() -> Lark:
    grammar = resources.files("broker.sql").joinpath("tsql.lark").read_text(encoding="utf-8")
    keywords = dict.fromkeys(_KEYWORD_TERMINAL.findall(grammar), _whole_keyword)
    return Lark(grammar, start="batch", parser="lalr", lexer="contextual", propagate_positions=True,
                maybe_placeholders=True, cache=False, lexer_callbacks=keywords)


def _whole_keyword(token: Token) -> Token:
    """A keyword is a whole word: where no name may stand, the lexer took the start of
    one for it (``SELECT1`` ran as SELECT 1, ``ENDCONVERSATION`` as END CONVERSATION)."""
    text, end = _lexing.get(), token.end_pos
    if end is not None and end < len(text) and _IDENTIFIER_CHARACTER.match(text, end):
        word = _IDENTIFIER_CHARACTER.pattern
        near = re.match(rf"{word}*", text[token.start_pos or 0:]).group(0)  # type: ignore[union-attr]
        raise SqlError(INCORRECT_SYNTAX, f"Incorrect syntax near '{near[:64]}'.", line=token.line or 1)
    return token


def parse_batch(text: str, first_line: int = 1) -> list[n.Statement]:
    """The statements of one batch; ``first_line`` is the batch's first line in its script."""
    lexed = _without_comments(text, first_line)
    lexing = _lexing.set(lexed)
    try:
        tree = _parser().parse(lexed)
    except SqlError as error:  # a keyword run into a name (``_whole_keyword``): its line in the batch
        error.line += first_line - 1
        raise
    except UnexpectedInput as exc:
        raise _syntax_error(exc, lexed, first_line - 1) from None
    except RecursionError:
        raise _too_deep(first_line) from None
    finally:
        _lexing.reset(lexing)
    try:
        statements: list[n.Statement] = _Build(text, first_line - 1).transform(tree)
    except VisitError as exc:
        if isinstance(exc.orig_exc, SqlError):
            raise exc.orig_exc from None
        if isinstance(exc.orig_exc, RecursionError):
            raise _too_deep(first_line) from None
        raise
    except RecursionError:
        raise _too_deep(first_line) from None
    return statements


def _without_comments(text: str, first_line: int) -> str:
    """``text`` with its comments blanked out, line breaks kept (so positions and lines stay):
    the batch splitter's reading of strings and comments, which nests block comments as SQL
    Server does and a regular grammar cannot. A string, quoted name or block comment left
    open is SQL Server's lexer error: 105 or 113, whatever else is wrong with the batch."""
    pieces: list[str] = []
    written = 0
    for span in spans(text):
        if not span.closed:
            line = first_line + len(_LINE_END.findall(text, 0, span.start))
            if span.kind == "/*":
                raise SqlError(MISSING_END_COMMENT, "Missing end comment mark '*/'.", line=line, level=15)
            unclosed = text[span.start + 1:span.start + 1 + MESSAGE_ROOM]
            raise SqlError(UNCLOSED_QUOTATION, f"Unclosed quotation mark after the character string '{unclosed}'.",
                           line=line, level=15)
        if span.kind in ("--", "/*"):
            pieces += [text[written:span.start], _NOT_LINE_BREAK.sub(" ", text[span.start:span.end])]
            written = span.end
    return "".join(pieces) + text[written:] if pieces else text


def _too_deep(line: int) -> SqlError:
    return SqlError(NESTED_TOO_DEEPLY, "Some part of your SQL statement is nested too deeply. Rewrite the query or "
                                       "break it up into smaller queries.", line=line)


def _syntax_error(exc: UnexpectedInput, text: str, line_offset: int) -> SqlError:
    line = (getattr(exc, "line", None) or text.count("\n") + 1) + line_offset
    if isinstance(exc, UnexpectedToken) and exc.token.type != "$END":
        near = str(exc.token)
    elif isinstance(exc, UnexpectedCharacters):
        position = exc.pos_in_stream or 0
        near = text[position:position + 1]
    elif isinstance(exc, UnexpectedEOF) or (isinstance(exc, UnexpectedToken) and exc.token.type == "$END"):
        last = text.rstrip().rsplit(None, 1)
        near = last[-1] if last else ""
        return SqlError(UNEXPECTED_END, f"Incorrect syntax near '{near[:64]}'. The batch ends too early.",
                        line=line)
    else:  # pragma: no cover - lark raises only the kinds above
        near = "?"
    return SqlError(INCORRECT_SYNTAX, f"Incorrect syntax near '{near[:64]}'.", line=line)

class _Build(DdlBuild):
    """Tree to ``nodes``: one method per grammar rule that is not inlined (the DDL's in
    ``DdlBuild``)."""

    # -- names and literals ---------------------------------------------------------------

    def name(self, children: list[Token]) -> Name:
        return Name(unquote(str(children[0])))

    def object_name(self, children: list[Any]) -> ObjectName:
        return ObjectName(str(part) if part is not None else "" for part in children)

    def dotted_name(self, children: list[Any]) -> ObjectName:
        return ObjectName(str(part) for part in children)

    def string(self, children: list[Token]) -> n.Literal:
        return n.Literal(string_text(str(children[0])))

    def nstring(self, children: list[Token]) -> n.Literal:
        return n.Literal(string_text(str(children[0])), unicode=True)

    def number(self, children: list[Token]) -> n.Literal:
        text = self._in_range(children[0])
        if "e" in text.lower():
            value = float(text)
            if not math.isfinite(value):
                raise self._out_of_range(children[0])
            return n.Literal(value)
        if "." in text:
            return n.Literal(Decimal(text))
        number = int(text)
        # SQL Server types a whole literal past INT's range as DECIMAL (not BIGINT).
        return n.Literal(number if number <= values.INT_HIGH else Decimal(number))

    def binary(self, children: list[Token]) -> n.Literal:
        digits = str(children[0])[2:]
        return n.Literal(bytes.fromhex(digits if len(digits) % 2 == 0 else "0" + digits))

    def null(self, _children: list[Any]) -> n.Literal:
        return n.Literal(None)

    def string_alias(self, children: list[Token]) -> Name:
        return Name(string_text(str(children[0])))

    def type_name(self, children: list[Any]) -> n.TypeName:
        name, length, scale = children
        size = None if length is None else (-1 if str(length).upper() == "MAX" else self._whole(length))
        return n.TypeName(str(name).upper(), size, None if scale is None else self._whole(scale))

    def _whole(self, token: Token) -> int:
        """A type's length, precision or scale: digits only (``NVARCHAR(1.5)`` is 102, as in SQL Server)."""
        if not str(token).isdigit():
            raise SqlError(INCORRECT_SYNTAX, f"Incorrect syntax near '{token}'.", line=(token.line or 1) + self.offset)
        return int(self._in_range(token))

    def _in_range(self, token: Token) -> str:
        """A number's text, at most 38 significant digits (1007), as SQL Server reads one."""
        mantissa = str(token).lower().partition("e")[0]
        if len(mantissa.replace(".", "").lstrip("0")) > values.MAX_PRECISION:
            raise self._out_of_range(token)
        return str(token)

    def _out_of_range(self, token: Token) -> SqlError:
        shown = str(token) if len(str(token)) <= 64 else str(token)[:61] + "..."
        return SqlError(NUMBER_OUT_OF_RANGE, f"The number '{shown}' is out of the range for numeric "
                                             f"representation (maximum precision {values.MAX_PRECISION}).",
                        line=(token.line or 1) + self.offset)

    def on_off(self, children: list[Token]) -> bool:
        return str(children[0]).upper() == "ON"

    # -- expressions ----------------------------------------------------------------------

    def variable(self, children: list[Token]) -> n.Variable:
        return n.Variable(str(children[0]))

    def system_variable(self, children: list[Token]) -> n.SystemVariable:
        return n.SystemVariable(str(children[0]).upper())

    def column_ref(self, children: list[Any]) -> n.Column:
        return n.Column(tuple(children[0]))

    def call(self, children: list[Any]) -> n.Call:
        name, arguments = children
        args, star, distinct = arguments if arguments is not None else ((), False, False)
        return n.Call(tuple(name), args, star, distinct)

    def keyword_call(self, children: list[Any]) -> n.Call:
        keyword, arguments = children
        args, star, distinct = arguments if arguments is not None else ((), False, False)
        return n.Call((str(keyword).upper(),), args, star, distinct)

    def star_argument(self, _children: list[Any]) -> tuple[tuple[n.Expr, ...], bool, bool]:
        return (), True, False

    def arguments(self, children: list[Any]) -> tuple[tuple[n.Expr, ...], bool, bool]:
        distinct = children[0] is not None
        return tuple(children[1:]), False, distinct

    def method(self, children: list[Any]) -> n.Method:
        target, name, arguments = children
        args = arguments[0] if arguments is not None else ()
        return n.Method(target, str(name), args)

    def cast(self, children: list[Any]) -> n.Cast:
        values = present(children)
        return n.Cast(values[0], values[1])

    def try_cast(self, children: list[Any]) -> n.Cast:
        values = present(children)
        return n.Cast(values[0], values[1], lenient=True)

    def convert(self, children: list[Any]) -> n.Cast:
        values = present(children)
        return n.Cast(values[1], values[0], style=values[2] if len(values) > 2 else None)

    def try_convert(self, children: list[Any]) -> n.Cast:
        values = present(children)
        return n.Cast(values[1], values[0], lenient=True, style=values[2] if len(values) > 2 else None)

    def signed(self, children: list[Any]) -> n.Expr:
        # The sign is ADD_OP's token, not a literal "-" or "+" of its own: LALR merges a
        # state where a sign may follow a name with one where an operator may, and the
        # lexer then read "a - 1" in a RECEIVE's column list as a sign (102).
        sign, operand = children
        if str(sign) == "+":
            return operand  # type: ignore[no-any-return]
        if isinstance(operand, n.Literal) and isinstance(operand.value, (int, float, Decimal)):
            return n.Literal(-operand.value)
        return n.Negate(operand)

    def arithmetic(self, children: list[Any]) -> n.Arithmetic:
        left, op, right = children
        return n.Arithmetic(str(op), left, right)

    def case_when(self, children: list[Any]) -> tuple[n.Expr, n.Expr]:
        values = present(children)
        return values[0], values[1]

    simple_when = case_when

    def searched_case(self, children: list[Any]) -> n.Case:
        whens = tuple(child for child in children if isinstance(child, tuple))
        rest = [child for child in present(children) if not isinstance(child, tuple)]
        return n.Case(whens, rest[0] if rest else None)

    def simple_case(self, children: list[Any]) -> n.Case:
        values = present(children)
        subject = values[0]
        whens = tuple(value for value in values[1:] if isinstance(value, tuple))
        rest = [value for value in values[1:] if not isinstance(value, tuple)]
        return n.Case(whens, rest[0] if rest else None, subject=subject)

    def iif(self, children: list[Any]) -> n.Iif:
        values = present(children)
        return n.Iif(values[0], values[1], values[2])

    def subquery(self, children: list[Any]) -> n.Subquery:
        return n.Subquery(children[0])

    def compare(self, children: list[Any]) -> n.Compare:
        left, op, right = children
        return n.Compare("<>" if str(op) == "!=" else str(op), left, right)

    def comparison(self, children: list[Token]) -> str:
        return str(children[0])

    def or_(self, children: list[Any]) -> n.Logical:
        return n.Logical("OR", children[0], children[2])

    def and_(self, children: list[Any]) -> n.Logical:
        return n.Logical("AND", children[0], children[2])

    def not_(self, children: list[Any]) -> n.Not:
        return n.Not(children[1])

    def is_null(self, children: list[Any]) -> n.IsNull:
        return n.IsNull(children[0], negated=False)

    def is_not_null(self, children: list[Any]) -> n.IsNull:
        return n.IsNull(children[0], negated=True)

    def like(self, children: list[Any]) -> n.Like:
        return n.Like(children[0], children[-1], negated="NOT" in token_kinds(children))

    def in_list(self, children: list[Any]) -> n.InList:
        values = present(children)
        return n.InList(values[0], tuple(values[1:]), negated="NOT" in token_kinds(children))

    def between(self, children: list[Any]) -> n.Between:
        values = present(children)
        return n.Between(values[0], values[1], values[2], negated="NOT" in token_kinds(children))

    def exists(self, children: list[Any]) -> n.Exists:
        return n.Exists(present(children)[0])

    # -- select ---------------------------------------------------------------------------

    def all_columns(self, _children: list[Any]) -> n.SelectItem:
        return n.SelectItem(None)

    def table_columns(self, children: list[Any]) -> n.SelectItem:
        return n.SelectItem(None, table=str(children[0]))

    def assign_column(self, children: list[Any]) -> n.SelectItem:
        variable, op, value = children
        return n.SelectItem(value, variable=str(variable), operator=str(op))

    def assign_op(self, children: list[Token]) -> str:
        return str(children[0])

    def aliased_column_first(self, children: list[Any]) -> n.SelectItem:
        alias, value = children
        return n.SelectItem(value, alias=str(alias))

    def column(self, children: list[Any]) -> n.SelectItem:
        value = children[0]
        alias = children[-1]
        return n.SelectItem(value, alias=str(alias) if alias is not None else None)

    def top(self, children: list[Any]) -> n.Expr:
        expressions: list[n.Expr] = of_type(children, n.Expr)
        if expressions:
            return expressions[0]
        number = next(child for child in children if isinstance(child, Token) and child.type == "NUMBER")
        return self.number([number])

    def table(self, children: list[Any]) -> n.TableSource:
        name, alias = of_type(children, ObjectName)[0], next((child for child in children if type(child) is Name), None)
        return n.TableSource(tuple(name), alias=None if alias is None else str(alias))

    @v_args(meta=True)
    def table_hints(self, meta: Any, children: list[Any]) -> Clause:
        """WITH (hint, ...): checked, then dropped (a snapshot read takes no locks: docs/sql.md)."""
        for hint in of_type(children, Name):
            if hint.upper() not in TABLE_HINTS:
                raise SqlError(UNKNOWN_TABLE_HINT, f"'{hint}' is not a recognized table hints option. If it is "
                                                   "intended as a parameter to a table-valued function or to the "
                                                   "CHANGETABLE function, ensure that your database compatibility "
                                                   "mode is set to 90.", line=line_of(meta, self.offset))
        return Clause("hints", None)

    @v_args(meta=True)
    def table_hints_without_with(self, meta: Any, children: list[Any]) -> Clause:
        """The old form, ``FROM t (NOLOCK)``: one hint of those SQL Server still takes so (1018 otherwise)."""
        hints = of_type(children, Name)
        if len(hints) > 1 or hints[0].upper() not in HINTS_WITHOUT_WITH:
            near = hints[1] if len(hints) > 1 else hints[0]
            raise SqlError(HINT_NEEDS_WITH, f"Incorrect syntax near '{near}'. If this is intended as a part of a "
                                            "table hint, A WITH keyword and parenthesis are now required. See SQL "
                                            "Server Books Online for proper syntax.", line=line_of(meta, self.offset))
        return Clause("hints", None)

    def table_variable(self, children: list[Any]) -> n.TableSource:
        values = present(children)
        return n.TableSource(None, alias=str(values[1]) if len(values) > 1 else None, variable=str(values[0]))

    def derived_table(self, children: list[Any]) -> n.TableSource:
        values = present(children)
        return n.TableSource(None, alias=str(values[-1]), derived=values[0])

    def inner_join(self, children: list[Any]) -> n.Join:
        values = present(children)
        return n.Join("INNER", values[0], values[1])

    def left_join(self, children: list[Any]) -> n.Join:
        values = present(children)
        return n.Join("LEFT", values[0], values[1])

    def cross_join(self, children: list[Any]) -> n.Join:
        return n.Join("CROSS", present(children)[0], None)

    def from_item(self, children: list[Any]) -> n.FromItem:
        return n.FromItem(children[0], list(children[1:]))

    def order_item(self, children: list[Any]) -> tuple[n.Expr, bool]:
        return children[0], "DESC" in token_kinds(children)

    def select_options(self, children: list[Any]) -> Clause:
        return Clause("options", (children[0] is not None, children[1]))

    def into_clause(self, children: list[Any]) -> Clause:
        variables = [str(child) for child in children if isinstance(child, Token) and child.type == "VARIABLE"]
        return Clause("into", variables[0] if variables else None)

    def from_clause(self, children: list[Any]) -> Clause:
        return Clause("from", of_type(children, n.FromItem))

    def where_clause(self, children: list[Any]) -> Clause:
        return Clause("where", next(iter(of_type(children, n.Expr)), None))

    having_clause = where_clause

    def group_clause(self, children: list[Any]) -> Clause:
        return Clause("group", of_type(children, n.Expr))

    def order_clause(self, children: list[Any]) -> Clause:
        return Clause("order", [child for child in children if isinstance(child, tuple)])

    @statement
    def select(self, children: list[Any], _meta: Any) -> n.Select:
        clauses = of_type(children, Clause)
        distinct, top = clauses[0].value
        into, sources, where, group_by, having, order_by = (clause.value for clause in clauses[1:])
        return n.Select(of_type(children, n.SelectItem), top=top, distinct=distinct, into=into, sources=sources,
                        where=where, group_by=group_by, having=having, order_by=order_by)

    # -- procedural -----------------------------------------------------------------------

    def batch(self, children: list[Any]) -> list[n.Statement]:
        return [child for child in children if isinstance(child, n.Statement)]

    def empty(self, _children: list[Any]) -> None:
        return None

    def column_def(self, children: list[Any]) -> tuple[str, n.TypeName]:
        return str(children[0]), children[1]

    def declare_scalar(self, children: list[Any]) -> tuple[str, n.TypeName, n.Expr | None]:
        values = present(children)
        return str(values[0]), values[1], values[2] if len(values) > 2 else None

    def declare_table(self, children: list[Any]) -> tuple[str, list[tuple[str, n.TypeName]]]:
        values = present(children)
        return str(values[0]), [value for value in values[1:] if isinstance(value, tuple)]

    @statement
    def declare(self, children: list[Any], _meta: Any) -> n.Declare:
        scalars = [child for child in children if isinstance(child, tuple) and len(child) == 3]
        tables = [child for child in children if isinstance(child, tuple) and len(child) == 2]
        return n.Declare(scalars, tables)

    @statement
    def set_variable(self, children: list[Any], _meta: Any) -> n.SetVariable:
        values = present(children)
        return n.SetVariable(str(values[0]), values[1], values[2])

    @statement
    def set_option(self, children: list[Any], meta: Any) -> n.SetOption:
        line = line_of(meta, self.offset)
        return n.SetOption([options.check_name(name, line) for name in of_type(children, Name)], children[-1])

    @statement
    def set_value(self, children: list[Any], meta: Any) -> n.SetValue:
        name, value = of_type(children, Name)[0], children[-1]
        if isinstance(value, n.Column) and len(value.parts) == 1:  # a word: SET DEADLOCK_PRIORITY LOW
            value = n.Literal(value.parts[0])
        return n.SetValue(options.check_name(name, line_of(meta, self.offset)), value)

    @statement
    def set_isolation(self, children: list[Any], _meta: Any) -> n.SetValue:
        return n.SetValue("TRANSACTION ISOLATION LEVEL", n.Literal(children[-1]))

    def isolation_level(self, children: list[Token]) -> str:
        return " ".join(str(child).upper() for child in children)

    @statement
    def print(self, children: list[Any], _meta: Any) -> n.Print:
        return n.Print(present(children)[0])

    @statement
    def if_(self, children: list[Any], _meta: Any) -> n.If:
        values = present(children)
        then = values[1] if len(values) > 1 else n.Block([])
        otherwise = values[2] if len(values) > 2 else None
        return n.If(values[0], _statement(then), None if otherwise is None else _statement(otherwise))

    @statement
    def while_(self, children: list[Any], _meta: Any) -> n.While:
        values = present(children)
        return n.While(values[0], _statement(values[1] if len(values) > 1 else None))

    @statement
    def block(self, children: list[Any], _meta: Any) -> n.Block:
        return n.Block(of_type(children, n.Statement))

    @statement
    def break_(self, _children: list[Any], _meta: Any) -> n.Break:
        return n.Break()

    @statement
    def continue_(self, _children: list[Any], _meta: Any) -> n.Continue:
        return n.Continue()

    @statement
    def return_(self, children: list[Any], _meta: Any) -> n.Return:
        values = present(children)
        return n.Return(values[0] if values else None)

    @statement
    def try_catch(self, children: list[Any], _meta: Any) -> n.TryCatch:
        # BEGIN TRY body END TRY BEGIN CATCH handler END CATCH: split at the CATCH keyword.
        split = next(index for index, child in enumerate(children)
                     if isinstance(child, Token) and child.type == "CATCH")
        return n.TryCatch(of_type(children[:split], n.Statement), of_type(children[split:], n.Statement))

    @statement
    def throw(self, children: list[Any], _meta: Any) -> n.Throw:
        values = present(children)
        if not values:
            return n.Throw(None)
        return n.Throw(values[0], values[1], values[2])

    @statement
    def raiserror(self, children: list[Any], _meta: Any) -> n.RaiseError:
        return n.RaiseError(of_type(children, n.Expr), [str(child).upper() for child in children
                                                      if isinstance(child, Name)])

    @statement
    def begin_tran(self, _children: list[Any], _meta: Any) -> n.BeginTransaction:
        return n.BeginTransaction()

    @statement
    def commit(self, _children: list[Any], _meta: Any) -> n.CommitTransaction:
        return n.CommitTransaction()

    @statement
    def rollback(self, children: list[Any], _meta: Any) -> n.RollbackTransaction:
        names = [str(child) for child in present(children) if isinstance(child, (Name, Token))]
        return n.RollbackTransaction(names[0] if names else None)

    @statement
    def save_tran(self, children: list[Any], _meta: Any) -> n.SaveTransaction:
        return n.SaveTransaction(str(present(children)[0]))

    def argument(self, children: list[Any]) -> tuple[str | None, n.Expr, bool]:
        variable, value, output = children
        return (str(variable) if variable is not None else None), value, output is not None

    @statement
    def execute(self, children: list[Any], _meta: Any) -> n.Execute:
        result = next((str(child) for child in children if isinstance(child, Token) and child.type == "VARIABLE"),
                      None)
        name = next(child for child in children if isinstance(child, ObjectName))
        return n.Execute(tuple(name), [child for child in children if isinstance(child, tuple)
                                       and not isinstance(child, ObjectName)], result)

    @statement
    def use(self, children: list[Any], _meta: Any) -> n.Use:
        return n.Use(str(present(children)[0]))

    def parameter(self, children: list[Any]) -> tuple[str, n.TypeName, n.Expr | None, bool]:
        values = non_keywords(children)
        variable = str(values[0])
        type_name = next(value for value in values if isinstance(value, n.TypeName))
        default = next((value for value in values if isinstance(value, n.Expr)), None)
        return variable, type_name, default, "OUTPUT" in token_kinds(children) or "OUT" in token_kinds(children)

    def procedure_verb(self, children: list[Token]) -> Clause:
        return Clause("verb", [child.type for child in children])

    def procedure_parameters(self, children: list[Any]) -> Clause:
        return Clause("parameters", [child for child in children if isinstance(child, tuple)])

    def procedure_options(self, _children: list[Any]) -> Clause:
        return Clause("options", None)

    @statement
    def create_procedure(self, children: list[Any], meta: Any) -> n.CreateProcedure:
        kinds = children[0].value
        name = next(child for child in children if isinstance(child, ObjectName))
        parameters = children[3].value
        source = self.text[meta.start_pos:]  # as written: line breaks inside literals are kept
        return n.CreateProcedure(tuple(name), parameters, of_type(children, n.Statement), source.strip(),
                                 alter=kinds[0] == "ALTER", create_or_alter="OR" in kinds)

    # -- conversations --------------------------------------------------------------------

    def related_conversation(self, children: list[Any]) -> tuple[str, Any]:
        return "related_conversation", children[-1]

    def related_conversation_group(self, children: list[Any]) -> tuple[str, Any]:
        return "related_conversation_group", children[-1]

    def lifetime(self, children: list[Any]) -> tuple[str, Any]:
        return "lifetime", children[-1]

    def encryption(self, children: list[Any]) -> tuple[str, Any]:
        return "encryption", children[-1]

    @statement
    def begin_dialog(self, children: list[Any], _meta: Any) -> n.BeginDialog:
        values = present(children)
        variable = str(values[0])
        names = [value for value in values if isinstance(value, Name)]
        expressions = [value for value in values if isinstance(value, n.Expr)]
        options: dict[str, Any] = dict(value for value in values if isinstance(value, tuple))
        contract = names[1] if "CONTRACT" in token_kinds(children) else None
        return n.BeginDialog(variable, str(names[0]), expressions[0], expressions[1] if len(expressions) > 1 else None,
                             contract, options)

    def handles(self, children: list[Any]) -> list[n.Expr]:
        return list(children)

    @statement
    def send(self, children: list[Any], _meta: Any) -> n.Send:
        handles = next(child for child in children if isinstance(child, list))
        message_type = next((str(child) for child in children if isinstance(child, Name)), None)
        bodies = [child for child in children if isinstance(child, n.Expr)]
        return n.Send(handles, message_type, bodies[0] if bodies else None)

    @statement
    def receive(self, children: list[Any], _meta: Any) -> n.Receive:
        kinds = token_kinds(children)
        top = children[2] if "TOP" in kinds else None
        items = of_type(children, n.SelectItem)
        queue = next(child for child in children if isinstance(child, ObjectName))
        into = next((str(child) for child in children if isinstance(child, Token) and child.type == "VARIABLE"),
                    None)
        where = None
        if "WHERE" in kinds:
            where = (str(children[-2]).lower(), children[-1])
        return n.Receive(items, tuple(queue), top=top, into=into, where=where)

    @statement
    def get_group(self, children: list[Any], _meta: Any) -> n.GetConversationGroup:
        variable = next(str(child) for child in children if isinstance(child, Token) and child.type == "VARIABLE")
        queue = next(child for child in children if isinstance(child, ObjectName))
        return n.GetConversationGroup(variable, tuple(queue))

    @statement
    def waitfor_statement(self, children: list[Any], _meta: Any) -> n.WaitFor:
        inner = next(child for child in children if isinstance(child, (n.Receive, n.GetConversationGroup)))
        timeout = children[-1] if isinstance(children[-1], n.Expr) else None
        return n.WaitFor(inner, timeout)

    @statement
    def waitfor_delay(self, children: list[Any], meta: Any) -> n.WaitForDelay:
        return n.WaitForDelay(self._time_argument(children[-1], meta), until=False)

    @statement
    def waitfor_time(self, children: list[Any], meta: Any) -> n.WaitForDelay:
        return n.WaitForDelay(self._time_argument(children[-1], meta), until=True)

    def _time_argument(self, value: n.Expr, meta: Any) -> n.Expr:
        """WAITFOR DELAY / TIME takes a string literal or a variable, nothing else (102)."""
        if isinstance(value, n.Variable) or isinstance(value, n.Literal) and isinstance(value.value, str):
            return value
        written = self.text[meta.start_pos:meta.end_pos].split(None, 2)[-1]
        raise SqlError(INCORRECT_SYNTAX, f"Incorrect syntax near '{written[:64]}'.", line=line_of(meta, self.offset))

    @statement
    def move_conversation(self, children: list[Any], _meta: Any) -> n.MoveConversation:
        values = of_type(children, n.Expr)
        return n.MoveConversation(values[0], values[1])

    @statement
    def end_conversation(self, children: list[Any], _meta: Any) -> n.EndConversation:
        values = of_type(children, n.Expr)
        kinds = token_kinds(children)
        if "ERROR" in kinds:
            return n.EndConversation(values[0], error=values[1], description=values[2])
        return n.EndConversation(values[0], cleanup="CLEANUP" in kinds)

    @statement
    def conversation_timer(self, children: list[Any], _meta: Any) -> n.ConversationTimer:
        values = of_type(children, n.Expr)
        return n.ConversationTimer(values[0], values[1])


def _statement(value: Any) -> n.Statement:
    return value if isinstance(value, n.Statement) else n.Block([])


__all__ = ["parse_batch", "unquote", "Tree"]
