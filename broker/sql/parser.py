"""T-SQL text to statements: the lark grammar ``tsql.lark`` (LALR), its lexing rules, and the
transformer to ``nodes`` (its parts: ``expression_syntax``, ``query_syntax``, ``ddl_syntax``).

A syntax error becomes SQL Server's error 102 ("Incorrect syntax near '...'") with the
line it is on (105 for a string or quoted name left open, 113 for a block comment);
nothing of the batch runs when any part of it does not parse, as in SQL Server, where a
batch is compiled whole before it runs.
"""

from __future__ import annotations

import contextvars
import functools
import re
from importlib import resources
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from broker.sql import nodes as n
from broker.sql import options
from broker.sql.batches import spans
from broker.sql.ddl_syntax import DdlBuild
from broker.sql.errors import INCORRECT_SYNTAX, SqlError
from broker.sql.query_syntax import QueryBuild
from broker.sql.syntax import (
    Clause,
    Name,
    ObjectName,
    line_of,
    non_keywords,
    of_type,
    present,
    statement,
    token_kinds,
    unquote,
)

UNEXPECTED_END = 102
UNCLOSED_QUOTATION = 105
MISSING_END_COMMENT = 113
# SQL Server's messages are nvarchar(2047): a long unclosed string is cut to fit.
MESSAGE_ROOM = 1990
_LINE_END = re.compile(r"\r\n|\r|\n")  # the line ends of the batch splitter
_NOT_LINE_BREAK = re.compile(r"[^\r\n]")
NESTED_TOO_DEEPLY = 191


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

class _Build(DdlBuild, QueryBuild):
    """Tree to ``nodes``: one method per grammar rule that is not inlined (the DDL's in
    ``DdlBuild``, SELECT's in ``QueryBuild``, names, literals and expressions in
    ``ExpressionBuild``)."""

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
