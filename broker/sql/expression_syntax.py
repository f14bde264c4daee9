"""The names, literals and expressions of the tree-to-``nodes`` transformer: SQL Server's
rules for identifiers and numbers (38 digits, 1007; a whole literal past INT is DECIMAL)
and every operator and call."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from lark import Token

from broker.sql import nodes as n
from broker.sql import values
from broker.sql.errors import INCORRECT_SYNTAX, SqlError
from broker.sql.syntax import (
    Builder,
    Name,
    ObjectName,
    present,
    string_text,
    token_kinds,
    unquote,
)

NUMBER_OUT_OF_RANGE = 1007


class ExpressionBuild(Builder):
    """One method per name, literal and expression rule of the grammar."""

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
