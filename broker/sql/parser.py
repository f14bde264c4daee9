"""T-SQL text to statements: the lark grammar ``tsql.lark`` (LALR) and a transformer to ``nodes``.

A syntax error becomes SQL Server's error 102 ("Incorrect syntax near '...'") with the
line it is on; nothing of the batch runs when any part of it does not parse, as in SQL
Server, where a batch is compiled whole before it runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from importlib import resources
from typing import Any

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from broker.sql import nodes as n
from broker.sql import options
from broker.sql.errors import SqlError

INCORRECT_SYNTAX = 102
UNEXPECTED_END = 102
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


@functools.cache
def _parser() -> Lark:
    grammar = resources.files("broker.sql").joinpath("tsql.lark").read_text(encoding="utf-8")
    return Lark(grammar, start="batch", parser="lalr", lexer="contextual", propagate_positions=True,
                maybe_placeholders=True, cache=False)


def parse_batch(text: str, first_line: int = 1) -> list[n.Statement]:
    """The statements of one batch; ``first_line`` is the batch's first line in its script."""
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as exc:
        raise _syntax_error(exc, text, first_line - 1) from None
    except RecursionError:
        raise _too_deep(first_line) from None
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


def unquote(token: str) -> str:
    """An identifier as written: ``[a]]b]`` is ``a]b``, ``"x""y"`` is ``x"y``."""
    if token.startswith("["):
        return token[1:-1].replace("]]", "]")
    if token.startswith('"'):
        return token[1:-1].replace('""', '"')
    return token


def _string(token: str) -> str:
    start = token.index("'")
    return token[start + 1:-1].replace("''", "'")


def _kinds(children: list[Any]) -> set[str]:
    return {child.type for child in children if isinstance(child, Token)}


def _values(children: list[Any]) -> list[Any]:
    """The children that are not keywords: names, expressions, nodes (``None`` placeholders kept)."""
    return [child for child in children if not (isinstance(child, Token) and child.type not in ("VARIABLE",))]


def _present(children: list[Any]) -> list[Any]:
    return [child for child in _values(children) if child is not None]


def _of(children: list[Any], kind: type) -> list[Any]:
    return [child for child in children if isinstance(child, kind)]


class _Name(str):
    """An identifier (unquoted); a ``str`` that the builder can tell from an expression."""


class _ObjectName(tuple[str, ...]):
    pass


@dataclass(frozen=True)
class _Clause:
    """A part of a statement built by a rule of its own (a SELECT's WHERE ...), by name."""
    name: str
    value: Any


def _line(meta: Any, offset: int) -> int:
    return (getattr(meta, "line", 1) or 1) + offset


def statement(method: Callable[..., n.Statement]) -> Callable[..., n.Statement]:
    """Transformer method for a statement: stamps the statement's line."""
    @v_args(meta=True)
    @functools.wraps(method)
    def build(self: _Build, meta: Any, children: list[Any]) -> n.Statement:
        node = method(self, children, meta)
        node.line = _line(meta, self.offset)
        return node
    return build


class _Build(Transformer[Token, Any]):
    """Tree to ``nodes``: one method per grammar rule that is not inlined."""

    def __init__(self, text: str, offset: int) -> None:
        super().__init__()
        self.text = text
        self.offset = offset

    # -- names and literals ---------------------------------------------------------------

    def name(self, children: list[Token]) -> _Name:
        return _Name(unquote(str(children[0])))

    def object_name(self, children: list[Any]) -> _ObjectName:
        return _ObjectName(str(part) if part is not None else "" for part in children)

    def dotted_name(self, children: list[Any]) -> _ObjectName:
        return _ObjectName(str(part) for part in children)

    def string(self, children: list[Token]) -> n.Literal:
        return n.Literal(_string(str(children[0])))

    def nstring(self, children: list[Token]) -> n.Literal:
        return n.Literal(_string(str(children[0])), unicode=True)

    def number(self, children: list[Token]) -> n.Literal:
        text = str(children[0])
        if "e" in text.lower():
            return n.Literal(float(text))
        if "." in text:
            return n.Literal(Decimal(text))
        return n.Literal(int(text))

    def binary(self, children: list[Token]) -> n.Literal:
        digits = str(children[0])[2:]
        return n.Literal(bytes.fromhex(digits if len(digits) % 2 == 0 else "0" + digits))

    def null(self, _children: list[Any]) -> n.Literal:
        return n.Literal(None)

    def string_alias(self, children: list[Token]) -> _Name:
        return _Name(_string(str(children[0])))

    def type_name(self, children: list[Any]) -> n.TypeName:
        name, length, scale = children
        size = None if length is None else (-1 if str(length).upper() == "MAX" else int(str(length)))
        return n.TypeName(str(name).upper(), size, None if scale is None else int(str(scale)))

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
        values = _present(children)
        return n.Cast(values[0], values[1])

    def try_cast(self, children: list[Any]) -> n.Cast:
        values = _present(children)
        return n.Cast(values[0], values[1], lenient=True)

    def convert(self, children: list[Any]) -> n.Cast:
        values = _present(children)
        return n.Cast(values[1], values[0], style=values[2] if len(values) > 2 else None)

    def try_convert(self, children: list[Any]) -> n.Cast:
        values = _present(children)
        return n.Cast(values[1], values[0], lenient=True, style=values[2] if len(values) > 2 else None)

    def negate(self, children: list[Any]) -> n.Expr:
        operand = children[0]
        if isinstance(operand, n.Literal) and isinstance(operand.value, (int, float, Decimal)):
            return n.Literal(-operand.value)
        return n.Negate(operand)

    def unary(self, children: list[Any]) -> Any:  # unary plus
        return children[0]

    def arithmetic(self, children: list[Any]) -> n.Arithmetic:
        left, op, right = children
        return n.Arithmetic(str(op), left, right)

    def case_when(self, children: list[Any]) -> tuple[n.Expr, n.Expr]:
        values = _present(children)
        return values[0], values[1]

    simple_when = case_when

    def searched_case(self, children: list[Any]) -> n.Case:
        whens = tuple(child for child in children if isinstance(child, tuple))
        rest = [child for child in _present(children) if not isinstance(child, tuple)]
        return n.Case(whens, rest[0] if rest else None)

    def simple_case(self, children: list[Any]) -> n.Case:
        values = _present(children)
        subject = values[0]
        whens = tuple(value for value in values[1:] if isinstance(value, tuple))
        rest = [value for value in values[1:] if not isinstance(value, tuple)]
        return n.Case(whens, rest[0] if rest else None, subject=subject)

    def iif(self, children: list[Any]) -> n.Iif:
        values = _present(children)
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
        return n.Like(children[0], children[-1], negated="NOT" in _kinds(children))

    def in_list(self, children: list[Any]) -> n.InList:
        values = _present(children)
        return n.InList(values[0], tuple(values[1:]), negated="NOT" in _kinds(children))

    def between(self, children: list[Any]) -> n.Between:
        values = _present(children)
        return n.Between(values[0], values[1], values[2], negated="NOT" in _kinds(children))

    def exists(self, children: list[Any]) -> n.Exists:
        return n.Exists(_present(children)[0])

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
        expressions: list[n.Expr] = _of(children, n.Expr)
        if expressions:
            return expressions[0]
        number = next(child for child in children if isinstance(child, Token) and child.type == "NUMBER")
        return self.number([number])

    def table(self, children: list[Any]) -> n.TableSource:
        name, alias = _of(children, _ObjectName)[0], next((child for child in children if type(child) is _Name), None)
        return n.TableSource(tuple(name), alias=None if alias is None else str(alias))

    @v_args(meta=True)
    def table_hints(self, meta: Any, children: list[Any]) -> _Clause:
        """WITH (hint, ...): checked, then dropped (a snapshot read takes no locks: docs/sql.md)."""
        for hint in _of(children, _Name):
            if hint.upper() not in TABLE_HINTS:
                raise SqlError(UNKNOWN_TABLE_HINT, f"'{hint}' is not a recognized table hints option. If it is "
                                                   "intended as a parameter to a table-valued function or to the "
                                                   "CHANGETABLE function, ensure that your database compatibility "
                                                   "mode is set to 90.", line=_line(meta, self.offset))
        return _Clause("hints", None)

    @v_args(meta=True)
    def table_hints_without_with(self, meta: Any, children: list[Any]) -> _Clause:
        """The old form, ``FROM t (NOLOCK)``: one hint of those SQL Server still takes so (1018 otherwise)."""
        hints = _of(children, _Name)
        if len(hints) > 1 or hints[0].upper() not in HINTS_WITHOUT_WITH:
            near = hints[1] if len(hints) > 1 else hints[0]
            raise SqlError(HINT_NEEDS_WITH, f"Incorrect syntax near '{near}'. If this is intended as a part of a "
                                            "table hint, A WITH keyword and parenthesis are now required. See SQL "
                                            "Server Books Online for proper syntax.", line=_line(meta, self.offset))
        return _Clause("hints", None)

    def table_variable(self, children: list[Any]) -> n.TableSource:
        values = _present(children)
        return n.TableSource(None, alias=str(values[1]) if len(values) > 1 else None, variable=str(values[0]))

    def derived_table(self, children: list[Any]) -> n.TableSource:
        values = _present(children)
        return n.TableSource(None, alias=str(values[-1]), derived=values[0])

    def inner_join(self, children: list[Any]) -> n.Join:
        values = _present(children)
        return n.Join("INNER", values[0], values[1])

    def left_join(self, children: list[Any]) -> n.Join:
        values = _present(children)
        return n.Join("LEFT", values[0], values[1])

    def cross_join(self, children: list[Any]) -> n.Join:
        return n.Join("CROSS", _present(children)[0], None)

    def from_item(self, children: list[Any]) -> n.FromItem:
        return n.FromItem(children[0], list(children[1:]))

    def order_item(self, children: list[Any]) -> tuple[n.Expr, bool]:
        return children[0], "DESC" in _kinds(children)

    def select_options(self, children: list[Any]) -> _Clause:
        return _Clause("options", (children[0] is not None, children[1]))

    def into_clause(self, children: list[Any]) -> _Clause:
        variables = [str(child) for child in children if isinstance(child, Token) and child.type == "VARIABLE"]
        return _Clause("into", variables[0] if variables else None)

    def from_clause(self, children: list[Any]) -> _Clause:
        return _Clause("from", _of(children, n.FromItem))

    def where_clause(self, children: list[Any]) -> _Clause:
        return _Clause("where", next(iter(_of(children, n.Expr)), None))

    having_clause = where_clause

    def group_clause(self, children: list[Any]) -> _Clause:
        return _Clause("group", _of(children, n.Expr))

    def order_clause(self, children: list[Any]) -> _Clause:
        return _Clause("order", [child for child in children if isinstance(child, tuple)])

    @statement
    def select(self, children: list[Any], _meta: Any) -> n.Select:
        clauses = _of(children, _Clause)
        distinct, top = clauses[0].value
        into, sources, where, group_by, having, order_by = (clause.value for clause in clauses[1:])
        return n.Select(_of(children, n.SelectItem), top=top, distinct=distinct, into=into, sources=sources,
                        where=where, group_by=group_by, having=having, order_by=order_by)

    # -- procedural -----------------------------------------------------------------------

    def batch(self, children: list[Any]) -> list[n.Statement]:
        return [child for child in children if isinstance(child, n.Statement)]

    def empty(self, _children: list[Any]) -> None:
        return None

    def column_def(self, children: list[Any]) -> tuple[str, n.TypeName]:
        return str(children[0]), children[1]

    def declare_scalar(self, children: list[Any]) -> tuple[str, n.TypeName, n.Expr | None]:
        values = _present(children)
        return str(values[0]), values[1], values[2] if len(values) > 2 else None

    def declare_table(self, children: list[Any]) -> tuple[str, list[tuple[str, n.TypeName]]]:
        values = _present(children)
        return str(values[0]), [value for value in values[1:] if isinstance(value, tuple)]

    @statement
    def declare(self, children: list[Any], _meta: Any) -> n.Declare:
        scalars = [child for child in children if isinstance(child, tuple) and len(child) == 3]
        tables = [child for child in children if isinstance(child, tuple) and len(child) == 2]
        return n.Declare(scalars, tables)

    @statement
    def set_variable(self, children: list[Any], _meta: Any) -> n.SetVariable:
        values = _present(children)
        return n.SetVariable(str(values[0]), values[1], values[2])

    @statement
    def set_option(self, children: list[Any], meta: Any) -> n.SetOption:
        line = _line(meta, self.offset)
        return n.SetOption([options.check_name(name, line) for name in _of(children, _Name)], children[-1])

    @statement
    def set_value(self, children: list[Any], meta: Any) -> n.SetValue:
        name, value = _of(children, _Name)[0], children[-1]
        if isinstance(value, n.Column) and len(value.parts) == 1:  # a word: SET DEADLOCK_PRIORITY LOW
            value = n.Literal(value.parts[0])
        return n.SetValue(options.check_name(name, _line(meta, self.offset)), value)

    @statement
    def set_isolation(self, children: list[Any], _meta: Any) -> n.SetValue:
        return n.SetValue("TRANSACTION ISOLATION LEVEL", n.Literal(children[-1]))

    def isolation_level(self, children: list[Token]) -> str:
        return " ".join(str(child).upper() for child in children)

    @statement
    def print(self, children: list[Any], _meta: Any) -> n.Print:
        return n.Print(_present(children)[0])

    @statement
    def if_(self, children: list[Any], _meta: Any) -> n.If:
        values = _present(children)
        then = values[1] if len(values) > 1 else n.Block([])
        otherwise = values[2] if len(values) > 2 else None
        return n.If(values[0], _statement(then), None if otherwise is None else _statement(otherwise))

    @statement
    def while_(self, children: list[Any], _meta: Any) -> n.While:
        values = _present(children)
        return n.While(values[0], _statement(values[1] if len(values) > 1 else None))

    @statement
    def block(self, children: list[Any], _meta: Any) -> n.Block:
        return n.Block(_of(children, n.Statement))

    @statement
    def break_(self, _children: list[Any], _meta: Any) -> n.Break:
        return n.Break()

    @statement
    def continue_(self, _children: list[Any], _meta: Any) -> n.Continue:
        return n.Continue()

    @statement
    def return_(self, children: list[Any], _meta: Any) -> n.Return:
        values = _present(children)
        return n.Return(values[0] if values else None)

    @statement
    def try_catch(self, children: list[Any], _meta: Any) -> n.TryCatch:
        # BEGIN TRY body END TRY BEGIN CATCH handler END CATCH: split at the CATCH keyword.
        split = next(index for index, child in enumerate(children)
                     if isinstance(child, Token) and child.type == "CATCH")
        return n.TryCatch(_of(children[:split], n.Statement), _of(children[split:], n.Statement))

    @statement
    def throw(self, children: list[Any], _meta: Any) -> n.Throw:
        values = _present(children)
        if not values:
            return n.Throw(None)
        return n.Throw(values[0], values[1], values[2])

    @statement
    def raiserror(self, children: list[Any], _meta: Any) -> n.RaiseError:
        return n.RaiseError(_of(children, n.Expr), [str(child).upper() for child in children
                                                      if isinstance(child, _Name)])

    @statement
    def begin_tran(self, _children: list[Any], _meta: Any) -> n.BeginTransaction:
        return n.BeginTransaction()

    @statement
    def commit(self, _children: list[Any], _meta: Any) -> n.CommitTransaction:
        return n.CommitTransaction()

    @statement
    def rollback(self, children: list[Any], _meta: Any) -> n.RollbackTransaction:
        names = [str(child) for child in _present(children) if isinstance(child, (_Name, Token))]
        return n.RollbackTransaction(names[0] if names else None)

    @statement
    def save_tran(self, children: list[Any], _meta: Any) -> n.SaveTransaction:
        return n.SaveTransaction(str(_present(children)[0]))

    def argument(self, children: list[Any]) -> tuple[str | None, n.Expr, bool]:
        variable, value, output = children
        return (str(variable) if variable is not None else None), value, output is not None

    @statement
    def execute(self, children: list[Any], _meta: Any) -> n.Execute:
        result = next((str(child) for child in children if isinstance(child, Token) and child.type == "VARIABLE"),
                      None)
        name = next(child for child in children if isinstance(child, _ObjectName))
        return n.Execute(tuple(name), [child for child in children if isinstance(child, tuple)
                                       and not isinstance(child, _ObjectName)], result)

    @statement
    def use(self, children: list[Any], _meta: Any) -> n.Use:
        return n.Use(str(_present(children)[0]))

    def parameter(self, children: list[Any]) -> tuple[str, n.TypeName, n.Expr | None, bool]:
        values = _values(children)
        variable = str(values[0])
        type_name = next(value for value in values if isinstance(value, n.TypeName))
        default = next((value for value in values if isinstance(value, n.Expr)), None)
        return variable, type_name, default, "OUTPUT" in _kinds(children) or "OUT" in _kinds(children)

    def procedure_verb(self, children: list[Token]) -> _Clause:
        return _Clause("verb", [child.type for child in children])

    def procedure_parameters(self, children: list[Any]) -> _Clause:
        return _Clause("parameters", [child for child in children if isinstance(child, tuple)])

    def procedure_options(self, _children: list[Any]) -> _Clause:
        return _Clause("options", None)

    @statement
    def create_procedure(self, children: list[Any], meta: Any) -> n.CreateProcedure:
        kinds = children[0].value
        name = next(child for child in children if isinstance(child, _ObjectName))
        parameters = children[3].value
        lines = self.text.splitlines(keepends=True)
        source = "".join(lines[meta.line - 1:])[meta.column - 1:] if lines else ""
        return n.CreateProcedure(tuple(name), parameters, _of(children, n.Statement), source.strip(),
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
        values = _present(children)
        variable = str(values[0])
        names = [value for value in values if isinstance(value, _Name)]
        expressions = [value for value in values if isinstance(value, n.Expr)]
        options: dict[str, Any] = dict(value for value in values if isinstance(value, tuple))
        contract = names[1] if "CONTRACT" in _kinds(children) else None
        return n.BeginDialog(variable, str(names[0]), expressions[0], expressions[1] if len(expressions) > 1 else None,
                             contract, options)

    def handles(self, children: list[Any]) -> list[n.Expr]:
        return list(children)

    @statement
    def send(self, children: list[Any], _meta: Any) -> n.Send:
        handles = next(child for child in children if isinstance(child, list))
        message_type = next((str(child) for child in children if isinstance(child, _Name)), None)
        bodies = [child for child in children if isinstance(child, n.Expr)]
        return n.Send(handles, message_type, bodies[0] if bodies else None)

    @statement
    def receive(self, children: list[Any], _meta: Any) -> n.Receive:
        kinds = _kinds(children)
        top = children[2] if "TOP" in kinds else None
        items = _of(children, n.SelectItem)
        queue = next(child for child in children if isinstance(child, _ObjectName))
        into = next((str(child) for child in children if isinstance(child, Token) and child.type == "VARIABLE"),
                    None)
        where = None
        if "WHERE" in kinds:
            where = (str(children[-2]).lower(), children[-1])
        return n.Receive(items, tuple(queue), top=top, into=into, where=where)

    @statement
    def get_group(self, children: list[Any], _meta: Any) -> n.GetConversationGroup:
        variable = next(str(child) for child in children if isinstance(child, Token) and child.type == "VARIABLE")
        queue = next(child for child in children if isinstance(child, _ObjectName))
        return n.GetConversationGroup(variable, tuple(queue))

    @statement
    def waitfor_statement(self, children: list[Any], _meta: Any) -> n.WaitFor:
        inner = next(child for child in children if isinstance(child, (n.Receive, n.GetConversationGroup)))
        timeout = children[-1] if isinstance(children[-1], n.Expr) else None
        return n.WaitFor(inner, timeout)

    @statement
    def waitfor_delay(self, children: list[Any], _meta: Any) -> n.WaitForDelay:
        return n.WaitForDelay(children[-1], until=False)

    @statement
    def waitfor_time(self, children: list[Any], _meta: Any) -> n.WaitForDelay:
        return n.WaitForDelay(children[-1], until=True)

    @statement
    def move_conversation(self, children: list[Any], _meta: Any) -> n.MoveConversation:
        values = _of(children, n.Expr)
        return n.MoveConversation(values[0], values[1])

    @statement
    def end_conversation(self, children: list[Any], _meta: Any) -> n.EndConversation:
        values = _of(children, n.Expr)
        kinds = _kinds(children)
        if "ERROR" in kinds:
            return n.EndConversation(values[0], error=values[1], description=values[2])
        return n.EndConversation(values[0], cleanup="CLEANUP" in kinds)

    @statement
    def conversation_timer(self, children: list[Any], _meta: Any) -> n.ConversationTimer:
        values = _of(children, n.Expr)
        return n.ConversationTimer(values[0], values[1])

    # -- DDL: each becomes an n.Ddl with its clauses by name -------------------------------

    @v_args(meta=True)
    def option(self, meta: Any, children: list[Any]) -> n.Option:
        return n.Option(str(children[0]).upper(), children[1], _line(meta, self.offset))

    plain_option = option

    @v_args(meta=True)
    def nested_option(self, meta: Any, children: list[Any]) -> n.Option:
        return n.Option(str(children[0]).upper(), [child for child in children[1:] if child is not None],
                        _line(meta, self.offset))

    @v_args(meta=True)
    def execute_as(self, meta: Any, children: list[Any]) -> n.Option:
        return n.Option("EXECUTE AS", children[-1], _line(meta, self.offset))

    @v_args(meta=True)
    def drop_activation(self, meta: Any, _children: list[Any]) -> n.Option:
        return n.Option("DROP", True, _line(meta, self.offset))

    @v_args(meta=True)
    def endpoint_option(self, meta: Any, children: list[Any]) -> n.Option:
        words = children[1:]
        value = words[0] if len(words) == 1 else tuple(words)
        return n.Option(str(children[0]).upper(), value, _line(meta, self.offset))

    def dotted_option(self, children: list[Any]) -> _Name:
        return _Name(".".join(str(child) for child in children))

    def parenthesised(self, children: list[Any]) -> Any:
        return children[0]

    def validation(self, children: list[Any]) -> tuple[str, str | None]:
        names = _of(children, _Name)
        return str(names[0]).upper(), (str(names[1]) if len(names) > 1 else None)

    def contract_usage(self, children: list[Any]) -> tuple[str, str]:
        names = _of(children, _Name)
        return str(names[0]), str(names[1]).upper()

    def service_change(self, children: list[Any]) -> tuple[str, str]:
        return str(children[0]).upper(), str(children[-1])

    def drop_kind(self, children: list[Token]) -> str:
        return " ".join(str(child).upper() for child in children)

    def _ddl(self, verb: str, kind: str, children: list[Any], **clauses: Any) -> n.Ddl:
        name = next(child for child in children if isinstance(child, (_Name, _ObjectName)))
        parts = tuple(name) if isinstance(name, _ObjectName) else (str(name),)
        options = [child for child in children if isinstance(child, n.Option)]
        return n.Ddl(verb, kind, parts, {"options": options, **clauses})

    @statement
    def create_message_type(self, children: list[Any], _meta: Any) -> n.Ddl:
        validation = next((child for child in children if isinstance(child, tuple)
                           and not isinstance(child, _ObjectName)), None)
        return self._ddl("CREATE", "MESSAGE TYPE", children, validation=validation)

    @statement
    def alter_message_type(self, children: list[Any], _meta: Any) -> n.Ddl:
        validation = next(child for child in children
                          if isinstance(child, tuple) and not isinstance(child, _ObjectName))
        return self._ddl("ALTER", "MESSAGE TYPE", children, validation=validation)

    @statement
    def create_contract(self, children: list[Any], _meta: Any) -> n.Ddl:
        usages = [child for child in children if isinstance(child, tuple) and not isinstance(child, _ObjectName)]
        return self._ddl("CREATE", "CONTRACT", children, usages=usages)

    @statement
    def create_queue(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._ddl("CREATE", "QUEUE", children)

    @statement
    def alter_queue(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._ddl("ALTER", "QUEUE", children)

    @statement
    def alter_queue_storage(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._ddl("ALTER", "QUEUE", children, storage=True)

    @statement
    def create_service(self, children: list[Any], _meta: Any) -> n.Ddl:
        names = [str(child) for child in children if isinstance(child, _Name)]
        queue = next(child for child in children if isinstance(child, _ObjectName))
        owner = 1 if "AUTHORIZATION" in _kinds(children) else 0
        return n.Ddl("CREATE", "SERVICE", (names[0],), {"queue": tuple(queue), "contracts": names[1 + owner:]})

    @statement
    def alter_service(self, children: list[Any], _meta: Any) -> n.Ddl:
        names = [str(child) for child in children if isinstance(child, _Name)]
        queue = next((tuple(child) for child in children if isinstance(child, _ObjectName)), None)
        changes = [child for child in children if isinstance(child, tuple) and not isinstance(child, _ObjectName)]
        return n.Ddl("ALTER", "SERVICE", (names[0],), {"queue": queue, "changes": changes})

    @statement
    def create_route(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._ddl("CREATE", "ROUTE", children)

    @statement
    def alter_route(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._ddl("ALTER", "ROUTE", children)

    @statement
    def create_binding(self, children: list[Any], _meta: Any) -> n.Ddl:
        service = next(child for child in children if isinstance(child, n.Expr))
        return self._ddl("CREATE", "REMOTE SERVICE BINDING", children, service=service)

    @statement
    def alter_binding(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._ddl("ALTER", "REMOTE SERVICE BINDING", children)

    @statement
    def create_priority(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._ddl("CREATE", "BROKER PRIORITY", children)

    @statement
    def alter_priority(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._ddl("ALTER", "BROKER PRIORITY", children)

    @statement
    def create_endpoint(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._endpoint("CREATE", children)

    @statement
    def alter_endpoint(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._endpoint("ALTER", children)

    def _endpoint(self, verb: str, children: list[Any]) -> n.Ddl:
        names = [str(child) for child in children if isinstance(child, _Name)]
        kinds = [child.type for child in children if isinstance(child, Token)]
        state = None
        if "STATE" in kinds:
            state = names[2 if "AUTHORIZATION" in kinds else 1].upper()
        transport = [child for child in children if isinstance(child, n.Option) and not _is_broker_option(child)]
        broker = [child for child in children if isinstance(child, n.Option) and _is_broker_option(child)]
        protocols = [name.upper() for name in names if name.upper() in ("TCP", "HTTP", "SERVICE_BROKER",
                                                                         "DATABASE_MIRRORING", "TSQL")]
        return n.Ddl(verb, "ENDPOINT", (names[0],), {"state": state, "transport": transport, "broker": broker,
                                                    "protocols": protocols})

    @statement
    def create_schema_collection(self, children: list[Any], _meta: Any) -> n.Ddl:
        return self._ddl("CREATE", "XML SCHEMA COLLECTION", children, xsd=children[-1])

    def termination(self, children: list[Any]) -> _Name:
        return _Name(" ".join(str(child) for child in children if child is not None))

    @statement
    def create_database(self, children: list[Any], _meta: Any) -> n.Ddl:
        return n.Ddl("CREATE", "DATABASE", (str(_of(children, _Name)[0]),))

    @statement
    def alter_database(self, children: list[Any], _meta: Any) -> n.Ddl:
        names = [str(child) for child in children if isinstance(child, _Name)]
        switch = next((child for child in children if isinstance(child, bool)), None)
        return n.Ddl("ALTER", "DATABASE", (names[0],), {"setting": names[1].upper(), "switch": switch,
                                                       "termination": " ".join(names[2:]).upper() or None})

    @statement
    def drop(self, children: list[Any], _meta: Any) -> n.Ddl:
        kind = next(child for child in children if isinstance(child, str) and not isinstance(child, (_Name, Token)))
        name = next(child for child in children if isinstance(child, _ObjectName))
        return n.Ddl("DROP", "PROCEDURE" if kind == "PROC" else kind, tuple(name))


_BROKER_OPTIONS = {"AUTHENTICATION", "ENCRYPTION", "MESSAGE_FORWARDING", "MESSAGE_FORWARD_SIZE"}


def _is_broker_option(option: n.Option) -> bool:
    return option.name in _BROKER_OPTIONS


def _statement(value: Any) -> n.Statement:
    return value if isinstance(value, n.Statement) else n.Block([])


__all__ = ["parse_batch", "unquote", "Tree"]
