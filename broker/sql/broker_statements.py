"""The Service Broker statements of a T-SQL session: BEGIN DIALOG, SEND, RECEIVE (and
WAITFOR), GET CONVERSATION GROUP, MOVE and END CONVERSATION, BEGIN CONVERSATION TIMER;
and the delivery of RECEIVE's and SELECT's rows into variables, a table variable or a
result set.

Each runs through ``Transaction``'s verb of the same name, in the session's transaction
(``Session._in_transaction``); what a statement assigns to variables is checked before
the verb runs, and what RECEIVE projects is delivered inside its transaction, so that a
failing statement leaves no dialog begun and no message taken.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.sql import nodes as n
from broker.sql import values
from broker.sql.errors import SqlError
from broker.sql.expressions import Evaluator, Scope
from broker.sql.outputs import Output, ResultSet, RowsAffected

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from broker.database import Broker
    from broker.sql.databases import Databases
    from broker.sql.options import Options
    from broker.sql.queries import Projected
    from broker.sql.transactions import ScriptTransaction
    from broker.transaction import Transaction

OPERAND_TYPE_CLASH = 206
TRUNCATED = 2628


class BrokerStatements:
    """A mixin of ``Session``, which gives what the statements below use."""

    if TYPE_CHECKING:
        transaction: ScriptTransaction
        databases: Databases
        options: Options
        rowcount: int

        @property
        def db(self) -> Broker: ...

        def _in_transaction(self, work: Callable[[Transaction], Any], *, reading: bool = False) -> Any: ...

        def _emit(self, output: Output) -> None: ...

    def _begindialog(self, statement: n.BeginDialog, evaluator: Evaluator, scope: Scope) -> None:
        options = {name: (value if isinstance(value, bool) else evaluator.value(value))
                   for name, value in statement.options.items()}
        if "lifetime" in options and options["lifetime"] is None:
            raise SqlError(8406, "The dialog lifetime can not be NULL.")
        if "lifetime" in options:  # an int, as SQL Server converts it ('abc' is 245)
            options["lifetime"] = values.convert(options["lifetime"], n.TypeName("INT"))
        broker_instance = None if statement.broker_instance is None else evaluator.value(statement.broker_instance)
        to_service = evaluator.value(statement.to_service)
        _check_handle_variable(scope, statement.variable)  # before anything runs: nothing half done
        handle = self._in_transaction(lambda tx: tx.begin_dialog(
            statement.from_service, to_service, statement.contract or "DEFAULT",
            broker_instance=broker_instance, **options))
        scope.assign(statement.variable, handle)
        self.rowcount = 0

    def _send(self, statement: n.Send, evaluator: Evaluator, _scope: Scope) -> None:
        handles = [evaluator.value(handle) for handle in statement.handles]
        body: bytes | None = None
        if statement.body is not None:
            value = evaluator.value(statement.body)
            if value is None:
                raise SqlError(8433, "The message body may not be NULL.  A zero-length UNICODE or binary string "
                                     "is allowed.")
            body = values.convert(value, n.TypeName("VARBINARY", -1))
        message_type = statement.message_type or "DEFAULT"
        self._in_transaction(lambda tx: tx.send(handles if len(handles) > 1 else handles[0], message_type, body))
        self.rowcount = 0

    def _receive(self, statement: n.Receive, evaluator: Evaluator, scope: Scope, timeout: float | None = None) -> None:
        from broker.sql.queries import check_receive
        check_receive(statement.items, statement.into, scope)
        queue = self._queue_name(statement.queue)
        top = None if statement.top is None else values.top_count(evaluator.value(statement.top))
        where: dict[str, Any] = {}
        if statement.where is not None:
            column, value = statement.where
            if column not in ("conversation_handle", "conversation_group_id"):
                raise SqlError(102, f"Incorrect syntax near '{column}'. RECEIVE takes WHERE conversation_handle "
                                    "= ... or conversation_group_id = ...")
            where[column] = evaluator.value(value)
            if where[column] is None:
                raise SqlError(8418 if column == "conversation_handle" else 8436,
                               "The conversation handle is missing. Specify a conversation handle."
                               if column == "conversation_handle" else "The conversation group is missing.")
        self._in_transaction(lambda tx: self._take(tx.receive(queue, top, timeout=timeout, **where),
                                                   statement, evaluator, scope))

    def _take(self, messages: list[Any], statement: n.Receive, evaluator: Evaluator, scope: Scope) -> None:
        """Project and deliver what a RECEIVE took, in the transaction that took it: an
        error here rolls back an autocommit RECEIVE (the messages stay in the queue) and
        dooms an open transaction (no savepoint to undo the statement alone), so that no
        COMMIT can keep messages the statement never delivered."""
        from broker.sql.queries import project_messages
        try:
            self._deliver(project_messages(statement.items, messages, evaluator, statement.into), statement, scope)
        except BaseException:
            if messages:
                self.transaction.statement_failed()
            raise

    def _deliver(self, projected: Projected, statement: n.Receive | n.Select, scope: Scope) -> None:
        """The rows of a RECEIVE or SELECT: into variables, a table variable or a result set.
        Runs in the statement's transaction: an error here undoes a RECEIVE (``_take``)."""
        columns, produced, assignments = projected
        if assignments:
            self.rowcount = _assign_rows(produced, assignments, scope)
            return
        rows = list(produced)
        if statement.into is not None:
            table = scope.table(statement.into)
            if len(table.columns) != len(columns):
                raise SqlError(213, "Column name or number of supplied values does not match table definition.")
            # Every row converted before any is added: a failing statement leaves the table as it was.
            stored = [_stored_row(statement.into, table.columns, row) for row in rows]
            table.rows.extend(stored)
        else:
            self._emit(ResultSet(columns, tuple(rows)))
        self.rowcount = len(rows)
        if not self.options.nocount:
            self._emit(RowsAffected(len(rows)))

    def _queue_name(self, name: tuple[str, ...]) -> str:
        """The queue a RECEIVE or GET CONVERSATION GROUP names, in this database (40515 for another)."""
        from broker.sql.queries import local_object
        return local_object(name, self.databases.name)[-1]

    def _waitfor(self, statement: n.WaitFor, evaluator: Evaluator, scope: Scope) -> None:
        timeout: float | None = -1
        if statement.timeout is not None:
            milliseconds = values.convert(evaluator.value(statement.timeout), n.TypeName("INT"))
            timeout = -1 if milliseconds is None or milliseconds == -1 else milliseconds / 1000
            if milliseconds is not None and milliseconds < -1:
                raise SqlError(1090, "The timeout value of WAITFOR must be -1 or greater.")
        inner = statement.statement
        if isinstance(inner, n.Receive):
            self._receive(inner, evaluator, scope, timeout)
        else:
            self._getconversationgroup(inner, evaluator, scope, timeout)

    def _getconversationgroup(self, statement: n.GetConversationGroup, _evaluator: Evaluator, scope: Scope,
                              timeout: float | None = None) -> None:
        _check_handle_variable(scope, statement.variable)
        queue = self._queue_name(statement.queue)
        group = self._in_transaction(lambda tx: tx.get_conversation_group(queue, timeout=timeout))
        scope.assign(statement.variable, group)
        self.rowcount = 0 if group is None else 1

    def _moveconversation(self, statement: n.MoveConversation, evaluator: Evaluator, _scope: Scope) -> None:
        handle, group = evaluator.value(statement.handle), evaluator.value(statement.group)
        self._in_transaction(lambda tx: tx.move_conversation(handle, group))
        self.rowcount = 0

    def _endconversation(self, statement: n.EndConversation, evaluator: Evaluator, _scope: Scope) -> None:
        handle = evaluator.value(statement.handle)
        if statement.error is not None:
            assert statement.description is not None
            error, description = evaluator.value(statement.error), evaluator.value(statement.description)
            if error is None or description is None:
                raise SqlError(8419, "Both the error code and the description must be provided for END "
                                     "CONVERSATION WITH ERROR. Neither value can be NULL.")
            code = values.convert(error, n.TypeName("INT"))
            text = values.convert(description, n.TypeName("NVARCHAR", 3000))
            self._in_transaction(lambda tx: tx.end_conversation(handle, error=code, description=text))
        else:
            self._in_transaction(lambda tx: tx.end_conversation(handle, cleanup=statement.cleanup))
        self.rowcount = 0

    def _conversationtimer(self, statement: n.ConversationTimer, evaluator: Evaluator, _scope: Scope) -> None:
        handle = evaluator.value(statement.handle)
        seconds = values.convert(evaluator.value(statement.timeout), n.TypeName("INT"))
        self._in_transaction(lambda tx: tx.begin_conversation_timer(handle, timeout=seconds))
        self.rowcount = 0


def _check_handle_variable(scope: Scope, name: str) -> None:
    """The variable BEGIN DIALOG or GET CONVERSATION GROUP sets is declared (137) and a
    uniqueidentifier (206), checked before the verb runs: a failure after it would
    leave a conversation begun (or a group locked) that no variable holds."""
    variable = scope.scalar(name)
    if variable.type.name != "UNIQUEIDENTIFIER":
        raise SqlError(OPERAND_TYPE_CLASH, "Operand type clash: uniqueidentifier is incompatible with "
                                           f"{variable.type.name.lower()}")


def _stored_row(table: str, columns: list[tuple[str, n.TypeName]], row: tuple[Any, ...]) -> dict[str, Any]:
    return {name.lower(): _stored(value, type_name, table, name)
            for (name, type_name), value in zip(columns, row, strict=True)}


def _stored(value: Any, type_name: n.TypeName, table: str, column: str) -> Any:
    """``value`` as a table variable's column holds it: converted as for a variable, but a
    string or binary value too long for the column fails (2628, SQL Server's rule with
    ANSI_WARNINGS ON) where a variable silently keeps its start. Trailing blanks lost
    from a string lose nothing."""
    stored = values.convert(value, type_name, declared=True)
    if stored is None or type_name.name not in values.CHARACTER | values.BINARY:
        return stored
    whole = values.convert(value, n.TypeName("NVARCHAR" if isinstance(stored, str) else "VARBINARY", -1))
    lost = whole[len(stored):]
    if lost.rstrip(" ") if isinstance(lost, str) else lost:
        shown = stored if isinstance(stored, str) else f"0x{stored.hex().upper()}"
        raise SqlError(TRUNCATED, f"String or binary data would be truncated in table '{table}', column "
                                  f"'{column}'. Truncated value: '{shown}'.")
    return stored


def _assign_rows(rows: Iterable[tuple[Any, ...]], assignments: list[tuple[str, str]], scope: Scope) -> int:
    """``SELECT @v = expr ...``: each row assigns in turn (the last one wins, ``@s = @s + x``
    accumulates: the rows are evaluated as they are read); the number of rows."""
    count = 0
    for row in rows:
        for (variable, operator), value in zip(assignments, row, strict=True):
            if operator != "=":
                from broker.sql.expressions import arithmetic
                value = arithmetic(operator[0], scope.scalar(variable).value, value)
            scope.assign(variable, value)
        count += 1
    return count
