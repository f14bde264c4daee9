"""The parsed form of a T-SQL batch: statements and expressions as plain dataclasses.

The parser (``broker.sql.parser``) builds these from the grammar's tree; the session
(``broker.sql.session``) runs them. Every statement carries the line it starts on, which
error messages report the way ``sqlcmd`` does (``Msg 8426, Level 16, State 1, Line 7``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# -- expressions --------------------------------------------------------------------------


class Expr:
    """An expression: evaluated by ``broker.sql.expressions`` or written as SQL by ``broker.sql.queries``."""


@dataclass(frozen=True)
class TypeName:
    name: str  # upper case: NVARCHAR, UNIQUEIDENTIFIER, XML, INT, ...
    length: int | None = None  # None: none given; -1: MAX
    scale: int | None = None


@dataclass(frozen=True)
class Literal(Expr):
    value: Any  # None, int, float, Decimal, str, bytes
    unicode: bool = False  # N'...'


@dataclass(frozen=True)
class Variable(Expr):
    name: str  # as written, with its @


@dataclass(frozen=True)
class SystemVariable(Expr):
    name: str  # upper case, with its @@


@dataclass(frozen=True)
class Column(Expr):
    parts: tuple[str, ...]  # [alias.]column


@dataclass(frozen=True)
class Call(Expr):
    name: tuple[str, ...]  # the function's (possibly dotted) name; a method when its prefix names a column
    args: tuple[Expr, ...] = ()
    star: bool = False  # COUNT(*)
    distinct: bool = False


@dataclass(frozen=True)
class Method(Expr):
    target: Expr
    name: str  # value, query, exist, ...
    args: tuple[Expr, ...] = ()


@dataclass(frozen=True)
class Cast(Expr):
    operand: Expr
    type: TypeName
    lenient: bool = False  # TRY_CAST / TRY_CONVERT: NULL instead of an error
    style: Expr | None = None


@dataclass(frozen=True)
class Negate(Expr):
    operand: Expr


@dataclass(frozen=True)
class Arithmetic(Expr):
    op: str  # + - * / %
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Case(Expr):
    whens: tuple[tuple[Expr, Expr], ...]  # (condition or value, result)
    default: Expr | None
    subject: Expr | None = None  # CASE subject WHEN value ...: a simple CASE


@dataclass(frozen=True)
class Subquery(Expr):
    select: Select


# -- conditions (T-SQL keeps them apart from values) --------------------------------------


@dataclass(frozen=True)
class Compare(Expr):
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Logical(Expr):
    op: str  # AND / OR
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Not(Expr):
    operand: Expr


@dataclass(frozen=True)
class IsNull(Expr):
    operand: Expr
    negated: bool


@dataclass(frozen=True)
class Like(Expr):
    operand: Expr
    pattern: Expr
    negated: bool


@dataclass(frozen=True)
class InList(Expr):
    operand: Expr
    items: tuple[Expr, ...]
    negated: bool


@dataclass(frozen=True)
class Between(Expr):
    operand: Expr
    low: Expr
    high: Expr
    negated: bool


@dataclass(frozen=True)
class Exists(Expr):
    select: Select


@dataclass(frozen=True)
class Iif(Expr):
    condition: Expr
    then: Expr
    otherwise: Expr


# -- statements ---------------------------------------------------------------------------


@dataclass
class Statement:
    line: int = field(default=0, kw_only=True)


@dataclass
class SelectItem:
    """One item of a SELECT or RECEIVE list: ``*``, ``t.*``, an expression with its alias,
    or an assignment ``@v = expr``."""
    expr: Expr | None  # None: * (or table.*)
    alias: str | None = None
    variable: str | None = None
    operator: str = "="  # of an assignment: = += -= *= /=
    table: str | None = None  # table.*


@dataclass
class TableSource:
    name: tuple[str, ...] | None  # a table or view; None for a derived table or table variable
    alias: str | None = None
    variable: str | None = None
    derived: Select | None = None


@dataclass
class Join:
    kind: str  # INNER / LEFT / CROSS
    source: TableSource
    condition: Expr | None


@dataclass
class FromItem:
    source: TableSource
    joins: list[Join]


@dataclass
class Select(Statement):
    items: list[SelectItem]
    top: Expr | None = None
    distinct: bool = False
    into: str | None = None
    sources: list[FromItem] = field(default_factory=list)
    where: Expr | None = None
    group_by: list[Expr] = field(default_factory=list)
    having: Expr | None = None
    order_by: list[tuple[Expr, bool]] = field(default_factory=list)  # (expr, descending)


@dataclass
class Declare(Statement):
    variables: list[tuple[str, TypeName, Expr | None]]
    tables: list[tuple[str, list[tuple[str, TypeName]]]]


@dataclass
class SetVariable(Statement):
    variable: str
    operator: str
    value: Expr


@dataclass
class SetOption(Statement):
    """SET option [, option ...] ON | OFF."""
    options: list[str]  # upper case
    on: bool


@dataclass
class SetValue(Statement):
    """SET LOCK_TIMEOUT n, SET DEADLOCK_PRIORITY ..., SET TRANSACTION ISOLATION LEVEL ..."""
    option: str  # upper case
    value: Expr


@dataclass
class Print(Statement):
    value: Expr


@dataclass
class If(Statement):
    condition: Expr
    then: Statement
    otherwise: Statement | None


@dataclass
class While(Statement):
    condition: Expr
    body: Statement


@dataclass
class Block(Statement):
    body: list[Statement]


@dataclass
class Break(Statement):
    pass


@dataclass
class Continue(Statement):
    pass


@dataclass
class Return(Statement):
    value: Expr | None


@dataclass
class TryCatch(Statement):
    body: list[Statement]
    handler: list[Statement]


@dataclass
class Throw(Statement):
    number: Expr | None  # None: re-throw inside CATCH
    message: Expr | None = None
    state: Expr | None = None


@dataclass
class RaiseError(Statement):
    args: list[Expr]
    options: list[str]


@dataclass
class BeginTransaction(Statement):
    pass


@dataclass
class CommitTransaction(Statement):
    pass


@dataclass
class RollbackTransaction(Statement):
    savepoint: str | None


@dataclass
class SaveTransaction(Statement):
    name: str


@dataclass
class Execute(Statement):
    procedure: tuple[str, ...]
    args: list[tuple[str | None, Expr, bool]]  # (parameter name, value, OUTPUT)
    result: str | None  # EXEC @r = proc


@dataclass
class Use(Statement):
    database: str


@dataclass
class CreateProcedure(Statement):
    name: tuple[str, ...]
    parameters: list[tuple[str, TypeName, Expr | None, bool]]
    body: list[Statement]
    source: str  # the whole CREATE PROCEDURE text, kept in the catalog
    alter: bool = False
    create_or_alter: bool = False


@dataclass
class BeginDialog(Statement):
    variable: str
    from_service: str
    to_service: Expr
    broker_instance: Expr | None
    contract: str | None
    options: dict[str, Any]


@dataclass
class Send(Statement):
    handles: list[Expr]
    message_type: str | None
    body: Expr | None


@dataclass
class Receive(Statement):
    items: list[SelectItem]
    queue: tuple[str, ...]
    top: Expr | None = None
    into: str | None = None
    where: tuple[str, Expr] | None = None


@dataclass
class GetConversationGroup(Statement):
    variable: str
    queue: tuple[str, ...]


@dataclass
class WaitFor(Statement):
    statement: Receive | GetConversationGroup
    timeout: Expr | None


@dataclass
class WaitForDelay(Statement):
    value: Expr
    until: bool  # WAITFOR TIME


@dataclass
class MoveConversation(Statement):
    handle: Expr
    group: Expr


@dataclass
class EndConversation(Statement):
    handle: Expr
    error: Expr | None = None
    description: Expr | None = None
    cleanup: bool = False


@dataclass
class ConversationTimer(Statement):
    handle: Expr
    timeout: Expr


@dataclass
class Option:
    """``NAME = value`` in a DDL option list; nested ones (ACTIVATION (...)) hold a list."""
    name: str
    value: Any
    line: int = 0


@dataclass
class Ddl(Statement):
    """A DDL statement: its verb (CREATE/ALTER/DROP), kind (QUEUE, ROUTE, ...), name and clauses."""
    verb: str
    kind: str
    name: tuple[str, ...]
    clauses: dict[str, Any] = field(default_factory=dict)


@dataclass
class Permission(Statement):
    """GRANT / REVOKE permission [, ...] [ON class::name] TO | FROM principal [, ...]."""
    grant: bool
    permissions: list[str]  # upper case, words joined by one blank: VIEW DEFINITION
    securable: tuple[str, str] | None  # (class upper case, name); None: the database
    principals: list[str]
