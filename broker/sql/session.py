"""Running T-SQL scripts: batches, variables, control flow, transactions and errors.

A :class:`Session` is one connection's worth of state, as ``sqlcmd`` has: the open
transaction (``@@TRANCOUNT``) outlives a batch, variables do not. Each statement runs
through the public verbs (``Broker`` for objects, ``Transaction`` for conversations), so
the front end adds no semantics of its own.

Transactions (``broker.sql.transactions``): a statement outside BEGIN TRANSACTION runs
in a transaction of its own (autocommit). Inside one, every statement, DDL included,
joins it. An error ends its batch (a TRY block catches it first); a transaction it
leaves open stays open for the next batch (unless SET XACT_ABORT ON), and the end of the
script (``close``) rolls it back.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from broker.errors import BrokerError
from broker.sql import moments, values
from broker.sql import nodes as n
from broker.sql.batches import split_batches
from broker.sql.broker_statements import BrokerStatements
from broker.sql.databases import Databases, no_database
from broker.sql.errors import BreakLoop, ContinueLoop, ReturnFromBatch, SqlError
from broker.sql.expressions import Evaluator, Scalar, Scope, TableVariable
from broker.sql.options import Options
from broker.sql.outputs import Failed, Output, Printed, ResultSet
from broker.sql.parser import parse_batch
from broker.sql.transactions import UNSUPPORTED, ScriptTransaction

if TYPE_CHECKING:
    from broker.database import Broker
    from broker.transaction import Transaction

# Statements that hold others: @@ERROR is what the last statement inside them left.
_COMPOUND = (n.Block, n.If, n.While, n.TryCatch)

NOT_FIRST_IN_BATCH = 111
NO_PROCEDURE = 2812
NO_DATABASE = 911
ASSIGN_AND_RETRIEVE = 141
TOO_MANY_ARGUMENTS = 8144
MISSING_PARAMETER = 201
USER_ERROR = 50000
NESTED_TOO_DEEPLY = 191
OUT_OF_MEMORY = 701
ARITHMETIC_OVERFLOW = 8115
CONVERSION_FAILED = 245
SUBSTITUTION_TYPE = 2786


class Session(BrokerStatements):
    """One T-SQL session on a broker database.

    ``on_output`` is called with every result set, message and error as it happens, so a
    PRINT shows before a later WAITFOR returns; ``run`` also returns them. ``instance``
    (a ``broker.Instance``) lets USE switch between its databases, master and msdb (the
    instance catalog) included (``broker.sql.databases``).
    """

    def __init__(self, db: Broker, *, on_output: Callable[[Output], None] | None = None,
                 instance: Any | None = None, database_name: str | None = None) -> None:
        self.databases = Databases(db, instance, database_name)
        self._on_output = on_output
        self._outputs: list[Output] = []
        self.transaction = ScriptTransaction()
        self.rowcount = 0
        self.last_error = 0
        self.options = Options()
        self._caught: list[SqlError] = []
        self._procedure_name: str | None = None

    # -- running scripts ----------------------------------------------------------------

    def run(self, script: str) -> list[Output]:
        """Run every batch of ``script`` (split on GO lines); the outputs, in order. A
        batch that fails yields a :class:`Failed` and the next batch still runs."""
        start = len(self._outputs)
        for batch in split_batches(script):
            for _ in range(batch.count):
                if not self.run_batch(batch.text, batch.line):
                    break
        produced = self._outputs[start:]
        del self._outputs[start:]
        return produced

    def run_batch(self, text: str, first_line: int = 1) -> bool:
        """Parse and run one batch; False when it failed (the failure is an output)."""
        try:
            statements = parse_batch(text, first_line)
            _check_procedure_first(statements)
            _check_loops(statements, inside=False)
        except SqlError as error:  # compiling: nothing ran, the transaction is left as it is
            self._failed(error)
            return False
        succeeded = True
        try:
            self._run_list(statements, Scope())
        except ReturnFromBatch:
            pass
        except SqlError as error:
            self.transaction.batch_failed(error)
            self._failed(error)
            succeeded = False
        uncommittable = self.transaction.batch_ended()
        if uncommittable is not None:
            self._failed(uncommittable)
            succeeded = False
        return succeeded

    def _failed(self, error: SqlError) -> None:
        self.last_error = error.number
        self._emit(Failed(error))

    def close(self) -> None:
        """The script has ended: an open transaction is rolled back, as when sqlcmd disconnects."""
        self.transaction.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def db(self) -> Broker:
        """The database the session is in (USE changes it)."""
        return self.databases.db

    @property
    def database_name(self) -> str:
        return self.databases.name

    @property
    def instance(self) -> Any | None:
        return self.databases.instance

    def _emit(self, output: Output) -> None:
        if isinstance(output, ResultSet):  # a DATE leaves as a ``datetime.date``, as drivers hand it
            output = ResultSet(output.columns, tuple(
                tuple(value.date() if isinstance(value, values.Date) else value for value in row)
                for row in output.rows))
        self._outputs.append(output)
        if self._on_output is not None:
            self._on_output(output)

    # -- values the expressions read ------------------------------------------------------

    def system_variable(self, name: str) -> Any:
        readers: dict[str, Callable[[], Any]] = {
            "@@ROWCOUNT": lambda: self.rowcount,
            "@@TRANCOUNT": lambda: self.transaction.trancount,
            "@@LOCK_TIMEOUT": lambda: self.options.lock_timeout,
            "@@ERROR": lambda: self.last_error,
            "@@SPID": lambda: 1,
            "@@SERVERNAME": lambda: "servicebroker",
            "@@VERSION": lambda: "servicebroker (SQL Server Service Broker in Python)",
            "@@MAX_PRECISION": lambda: 38,
        }
        reader = readers.get(name)
        if reader is None:
            raise SqlError(137, f'Must declare the scalar variable "{name}".')
        return reader()

    def caught(self, field: str) -> Any:
        """ERROR_NUMBER() and its kin: the error the innermost CATCH block handles (NULL outside one)."""
        if not self._caught:
            return None
        error = self._caught[-1]
        return {"number": error.number, "message": error.message, "level": error.level, "state": error.state,
                "line": error.line, "procedure": error.procedure}[field]

    def xact_state(self) -> int:
        return self.transaction.state()

    def transmission_status(self, handle: Any) -> str:
        # Not a snapshot: the verb locks the endpoint it reads (PostgreSQL refuses that in READ ONLY).
        status: str = self._in_transaction(lambda tx: tx.get_transmission_status(handle))
        return status

    def query_rows(self, select: n.Select, scope: Scope,
                   outer: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """The rows of a SELECT used as a subquery or in EXISTS; ``outer``, the row of the
        query around it, for the columns it reads from there."""
        from broker.sql.queries import run_select
        _columns, rows = self._in_transaction(
            lambda tx: run_select(tx, self.db, select, Evaluator(self, scope, outer)), reading=True)
        return list(rows)

    # -- transactions ---------------------------------------------------------------------

    def _in_transaction(self, work: Callable[[Transaction], Any], *, reading: bool = False) -> Any:
        """Run ``work`` in the open transaction, or in one of its own (autocommit; a
        snapshot when it only reads)."""
        return self.transaction.run(self.db, work, reading=reading)

    # -- statements -----------------------------------------------------------------------

    def _run_list(self, statements: list[n.Statement], scope: Scope) -> None:
        for statement in statements:
            self._run(statement, scope)

    def _run(self, statement: n.Statement, scope: Scope) -> None:
        try:
            self._statement(statement, scope)
            if not isinstance(statement, _COMPOUND):
                self.last_error = 0  # @@ERROR: the last statement's, 0 when it succeeded
        except SqlError as error:  # stamped where it happened, by the innermost statement
            if not error.line:
                error.line = statement.line
            if self._procedure_name and not error.procedure:
                error.procedure = self._procedure_name
            if error.xact_abort is None:
                error.xact_abort = self.options.xact_abort and not error.from_raiserror
            raise

    def _statement(self, statement: n.Statement, scope: Scope) -> None:
        """Run one statement; whatever fails in it becomes a ``SqlError``."""
        try:
            getattr(self, "_" + type(statement).__name__.lower())(statement, Evaluator(self, scope), scope)
        except SqlError:
            raise
        except BrokerError as error:
            raise SqlError.of(error, statement.line, self._procedure_name) from None
        except RecursionError:
            raise SqlError(NESTED_TOO_DEEPLY, "Some part of your SQL statement is nested too deeply. Rewrite the "
                                              "query or break it up into smaller queries.",
                           line=statement.line) from None
        except MemoryError:  # a value too large for this process: the statement fails, the session goes on
            raise SqlError(OUT_OF_MEMORY, "There is insufficient system memory in resource pool 'default' to run "
                                          "this query.", line=statement.line) from None
        except ArithmeticError as error:  # a value out of Python's range: float overflow, decimal limits
            raise SqlError(ARITHMETIC_OVERFLOW, f"Arithmetic overflow error: {error}.", line=statement.line) from None
        except (ValueError, TypeError) as error:  # a value a built-in function cannot take
            raise SqlError(CONVERSION_FAILED, f"Conversion failed: {error}.", line=statement.line) from None

    def _block(self, statement: n.Block, _evaluator: Evaluator, scope: Scope) -> None:
        self._run_list(statement.body, scope)

    def _declare(self, statement: n.Declare, evaluator: Evaluator, scope: Scope) -> None:
        for name, type_name, initial in statement.variables:
            values.check_type(type_name, statement.line)
            variable = scope.declare(name, Scalar(type_name), statement.line, statement)
            if initial is not None and isinstance(variable, Scalar):
                variable.value = values.convert(evaluator.value(initial), type_name, declared=True)
        for name, columns in statement.tables:
            for _column, type_name in columns:
                values.check_type(type_name, statement.line)
            scope.declare(name, TableVariable(columns), statement.line, statement)

    def _setvariable(self, statement: n.SetVariable, evaluator: Evaluator, scope: Scope) -> None:
        value = evaluator.value(statement.value)
        if statement.operator != "=":
            from broker.sql.expressions import arithmetic
            value = arithmetic(statement.operator[0], scope.scalar(statement.variable).value, value)
        scope.assign(statement.variable, value)
        self.rowcount = 1

    def _setoption(self, statement: n.SetOption, _evaluator: Evaluator, _scope: Scope) -> None:
        for option in statement.options:
            self.options.switch(option, statement.on)
        self.rowcount = 0

    def _setvalue(self, statement: n.SetValue, evaluator: Evaluator, _scope: Scope) -> None:
        self.options.set(statement.option, evaluator.value(statement.value))
        self.rowcount = 0

    def _print(self, statement: n.Print, evaluator: Evaluator, _scope: Scope) -> None:
        value = evaluator.value(statement.value)
        self._emit(Printed("" if value is None else values.convert(value, n.TypeName("NVARCHAR", -1))))
        self.rowcount = 0

    def _if(self, statement: n.If, evaluator: Evaluator, scope: Scope) -> None:
        holds = evaluator.condition(statement.condition)
        self.last_error = 0  # the IF itself succeeded: in its branch @@ERROR is 0
        if holds:
            self._run(statement.then, scope)
        elif statement.otherwise is not None:
            self._run(statement.otherwise, scope)

    def _while(self, statement: n.While, evaluator: Evaluator, scope: Scope) -> None:
        while evaluator.condition(statement.condition):
            self.last_error = 0
            try:
                self._run(statement.body, scope)
            except BreakLoop:
                break
            except ContinueLoop:
                continue

    def _break(self, _statement: n.Break, _evaluator: Evaluator, _scope: Scope) -> None:
        raise BreakLoop

    def _continue(self, _statement: n.Continue, _evaluator: Evaluator, _scope: Scope) -> None:
        raise ContinueLoop

    def _return(self, statement: n.Return, evaluator: Evaluator, _scope: Scope) -> None:
        raise ReturnFromBatch(None if statement.value is None else evaluator.value(statement.value))

    def _trycatch(self, statement: n.TryCatch, _evaluator: Evaluator, scope: Scope) -> None:
        try:
            self._run_list(statement.body, scope)
        except SqlError as error:
            self.last_error = error.number
            self.transaction.caught(error)
            self._caught.append(error)
            try:
                self._run_list(statement.handler, scope)
            finally:
                self._caught.pop()

    def _throw(self, statement: n.Throw, evaluator: Evaluator, _scope: Scope) -> None:
        if statement.number is None:
            if not self._caught:
                raise SqlError(10704, "To rethrow an error, a THROW statement must be used inside a CATCH block.")
            raise self._caught[-1]
        assert statement.message is not None and statement.state is not None
        number = values.convert(evaluator.value(statement.number), n.TypeName("INT"))
        if number is None or number < 50000:
            raise SqlError(35100, f"Error number {number} in the THROW statement is outside the valid range. "
                                  "Specify an error number in the valid range of 50000 to 2147483647.")
        message = values.convert(evaluator.value(statement.message), n.TypeName("NVARCHAR", 2048))
        state = values.convert(evaluator.value(statement.state), n.TypeName("TINYINT"))
        raise SqlError(number, message or "", level=16, state=state or 0)

    def _raiseerror(self, statement: n.RaiseError, evaluator: Evaluator, _scope: Scope) -> None:
        args = [evaluator.value(arg) for arg in statement.args]
        if len(args) < 3:
            raise SqlError(102, "Incorrect syntax near ')'. RAISERROR takes a message, a severity and a state.")
        message, severity, state = args[0], args[1], args[2]
        number = USER_ERROR
        if isinstance(message, int):
            number, message = message, f"Error {message}"
        text = _format_message(values.convert(message, n.TypeName("NVARCHAR", 2047)) or "", args[3:])
        level = values.convert(severity, n.TypeName("INT")) or 0
        if level <= 10:
            self._emit(Printed(text))
            return
        raise SqlError(number, text, level=min(level, 25), state=values.convert(state, n.TypeName("INT")) or 1,
                       from_raiserror=True)

    def _begintransaction(self, _statement: n.BeginTransaction, _evaluator: Evaluator, _scope: Scope) -> None:
        self.transaction.begin(self.db)
        self.rowcount = 0

    def _committransaction(self, _statement: n.CommitTransaction, _evaluator: Evaluator, _scope: Scope) -> None:
        self.transaction.commit()
        self.rowcount = 0

    def _rollbacktransaction(self, statement: n.RollbackTransaction, _evaluator: Evaluator, _scope: Scope) -> None:
        self.transaction.rollback(statement.savepoint)
        self.rowcount = 0

    def _savetransaction(self, statement: n.SaveTransaction, _evaluator: Evaluator, _scope: Scope) -> None:
        raise SqlError(UNSUPPORTED, f"SAVE TRANSACTION {statement.name}: savepoints are not supported.")

    def _waitfordelay(self, statement: n.WaitForDelay, evaluator: Evaluator, _scope: Scope) -> None:
        wanted = moments.waitfor_time(evaluator.value(statement.value), delay=not statement.until)
        if statement.until:
            now = datetime.now()
            seconds = ((datetime.combine(now.date(), datetime.min.time()) + wanted) - now).total_seconds() % 86400
        else:
            seconds = wanted.total_seconds()
        time.sleep(max(0.0, seconds))

    def _use(self, statement: n.Use, _evaluator: Evaluator, _scope: Scope) -> None:
        member = self.databases.member(statement.database)
        if self.transaction.open and member is not None and member is not self.db:
            raise SqlError(UNSUPPORTED, "USE cannot switch databases inside an open transaction here.")
        self.databases.use(statement.database)
        self.rowcount = 0

    # -- procedures -----------------------------------------------------------------------

    def _createprocedure(self, statement: n.CreateProcedure, _evaluator: Evaluator, _scope: Scope) -> None:
        name = statement.name[-1]
        self._in_transaction(lambda _tx: self.db.create_procedure(
            name, statement.source, alter=statement.alter, replace=statement.create_or_alter))

    def _execute(self, statement: n.Execute, evaluator: Evaluator, scope: Scope) -> None:
        result = self.call_procedure(".".join(statement.procedure), statement.args, evaluator, scope)
        if statement.result is not None:
            scope.assign(statement.result, result)

    def call_procedure(self, name: str, args: list[tuple[str | None, n.Expr, bool]] | None = None,
                       evaluator: Evaluator | None = None, scope: Scope | None = None) -> Any:
        """EXEC a stored T-SQL procedure; its RETURN value. Activation calls it with no arguments."""
        short = name.rsplit(".", 1)[-1]
        definition = self._in_transaction(lambda _tx: self.db.procedure_definition(short), reading=True)
        if definition is None:
            raise SqlError(NO_PROCEDURE, f"Could not find stored procedure '{name}'.")
        procedure = _parsed_procedure(definition)
        inner = Scope()
        caller = evaluator or Evaluator(self, Scope())
        bound = _bind_arguments(procedure, args or [], caller, inner)
        outer_name, self._procedure_name = self._procedure_name, procedure.name[-1]
        outer_options = self.options.copy()  # SET inside a procedure lasts until it returns
        result: Any = 0
        try:
            self._run_list(procedure.body, inner)
        except ReturnFromBatch as returned:
            result = returned.value if returned.value is not None else 0
        finally:
            self._procedure_name = outer_name
            self.options.restore(outer_options)
        if scope is not None:
            for parameter, target in bound:
                scope.assign(target, inner.scalar(parameter).value)
        return result

    # -- SELECT and DDL -------------------------------------------------------------------

    def _select(self, statement: n.Select, evaluator: Evaluator, scope: Scope) -> None:
        from broker.sql.queries import run_select_statement
        self._in_transaction(lambda tx: self._deliver(run_select_statement(tx, self.db, statement, evaluator),
                                                      statement, scope), reading=True)

    def _ddl(self, statement: n.Ddl, evaluator: Evaluator, _scope: Scope) -> None:
        from broker.sql.ddl import run_ddl
        from broker.sql.security import INSTANCE_KINDS
        target = self.db
        if statement.kind == "DATABASE" and statement.verb == "CREATE":
            if self.transaction.open:
                raise SqlError(226, "CREATE DATABASE statement not allowed within multi-statement transaction.")
            self.databases.create(statement.name[-1])
            self.rowcount = 0
            return
        if statement.kind == "DATABASE":
            found = self.databases.member(statement.name[-1])
            if found is None:
                raise no_database(statement.name[-1])
            target = found
        elif statement.name:
            self.databases.local(statement.name)
        if statement.kind in INSTANCE_KINDS and self.transaction.open:
            raise _not_in_transaction(f"{statement.verb} {statement.kind}")
        if statement.kind == "PROCEDURE":
            self._in_transaction(lambda _tx: self.db.drop_procedure(statement.name[-1]))
        elif self.transaction.tx is not None and target is self.db:
            with self.db.within(self.transaction.tx):
                run_ddl(target, statement, evaluator, self.instance)
        else:
            run_ddl(target, statement, evaluator, self.instance)
        self.rowcount = 0

    def _permission(self, statement: n.Permission, _evaluator: Evaluator, _scope: Scope) -> None:
        """GRANT / REVOKE: on the endpoint, the instance's, in master only (4621) and never
        inside a user transaction; otherwise in this database, as one transaction."""
        from broker.sql.clauses import needs_instance
        from broker.sql.security import on_endpoint, run_permission
        if on_endpoint(statement):
            needs_instance(self.instance, "GRANT ... ON ENDPOINT")
            if not self.databases.in_master:
                raise SqlError(4621, "Permissions at the server scope can only be granted when the current "
                                     "database is master")
            if self.transaction.open:
                raise _not_in_transaction("GRANT")
            run_permission(self.db, statement, self.instance)
        else:
            self._in_transaction(lambda _tx: run_permission(self.db, statement, self.instance))
        self.rowcount = 0


def _not_in_transaction(statement: str) -> SqlError:
    return SqlError(574, f"{statement} statement not allowed within multi-statement transaction.")


def _check_loops(statements: list[n.Statement], *, inside: bool) -> None:
    """BREAK and CONTINUE only inside a WHILE (SQL Server refuses the batch: 135, 136)."""
    for statement in statements:
        if isinstance(statement, (n.Break, n.Continue)) and not inside:
            number, word = (135, "BREAK") if isinstance(statement, n.Break) else (136, "CONTINUE")
            raise SqlError(number, f"Cannot use a {word} statement outside the scope of a WHILE statement.",
                           line=statement.line)
        if isinstance(statement, n.While):
            _check_loops([statement.body], inside=True)
        elif isinstance(statement, n.If):
            _check_loops([statement.then] + ([statement.otherwise] if statement.otherwise else []), inside=inside)
        elif isinstance(statement, n.Block):
            _check_loops(statement.body, inside=inside)
        elif isinstance(statement, n.TryCatch):
            _check_loops(statement.body + statement.handler, inside=inside)
        elif isinstance(statement, n.CreateProcedure):
            _check_loops(statement.body, inside=False)


def _check_procedure_first(statements: list[n.Statement]) -> None:
    for index, statement in enumerate(statements):
        if isinstance(statement, n.CreateProcedure) and index > 0:
            raise SqlError(NOT_FIRST_IN_BATCH, "'CREATE/ALTER PROCEDURE' must be the first statement in a query "
                                               "batch.", line=statement.line)


@functools.lru_cache(maxsize=64)
def _parsed_procedure(definition: str) -> n.CreateProcedure:
    """A stored procedure's text, parsed (once per text: activation runs it again and again)."""
    statements = parse_batch(definition)
    if len(statements) != 1 or not isinstance(statements[0], n.CreateProcedure):
        raise SqlError(NO_PROCEDURE, "The stored procedure's text is not one CREATE PROCEDURE statement.")
    return statements[0]


def _bind_arguments(procedure: n.CreateProcedure, args: list[tuple[str | None, n.Expr, bool]],
                    evaluator: Evaluator, inner: Scope) -> list[tuple[str, str]]:
    """Declare the procedure's parameters in ``inner`` from the call's arguments; the
    OUTPUT pairs (parameter, caller's variable) to copy back."""
    parameters = {name.casefold(): (name, type_name, default, output)
                  for name, type_name, default, output in procedure.parameters}
    given: dict[str, tuple[n.Expr, bool]] = {}
    order = list(parameters)
    for index, (name, value, output) in enumerate(args):
        if name is None:
            if index >= len(order):
                raise SqlError(TOO_MANY_ARGUMENTS, f"Procedure or function {procedure.name[-1]} has too many "
                                                   "arguments specified.")
            key = order[index]
        else:
            key = name.casefold()
            if key not in parameters:
                raise SqlError(8145, f"{name} is not a parameter for procedure {procedure.name[-1]}.")
        given[key] = (value, output)
    copied: list[tuple[str, str]] = []
    for key, (name, type_name, default, output) in parameters.items():
        variable = Scalar(type_name)
        inner.declare(name, variable, 0)
        if key in given:
            value, wants_output = given[key]
            variable.value = values.convert(evaluator.value(value), type_name, declared=True)
            if wants_output and output and isinstance(value, n.Variable):
                copied.append((name, value.name))
        elif default is not None:
            variable.value = values.convert(evaluator.value(default), type_name, declared=True)
        else:
            raise SqlError(MISSING_PARAMETER, f"Procedure or function '{procedure.name[-1]}' expects parameter "
                                              f"'{name}', which was not supplied.")
    return copied


def _format_message(template: str, args: list[Any]) -> str:
    """RAISERROR's printf-style substitution (%s, %d, %i, %u, %x and %%)."""
    remaining = iter(enumerate(args, 1))

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "%%":
            return "%"
        position, value = next(remaining, (0, None))
        if value is None:
            return "(null)"
        kind = match.group(1)[-1].lower()
        if kind in "diux" and (not isinstance(value, int) or isinstance(value, bool)):
            raise SqlError(SUBSTITUTION_TYPE, f"The data type of substitution parameter {position} does not match "
                                              "the expected type of the format specification.")
        if kind in "diu":
            return str(int(value))
        if kind == "x":
            return format(int(value), "x")
        return str(value)

    return re.sub(r"%%|%([-+ 0#]*\d*(?:\.\d+)?[sdiuxX])", substitute, template)


@contextmanager
def session(db: Broker, **options: Any) -> Iterator[Session]:
    """A :class:`Session` closed (its open transaction rolled back) when the block ends."""
    opened = Session(db, **options)
    try:
        yield opened
    finally:
        opened.close()


def run(db: Broker, script: str, **options: Any) -> list[Output]:
    """Run ``script`` in a session of its own; the outputs. The script's open transaction
    (if any) is rolled back at its end."""
    with session(db, **options) as opened:
        return opened.run(script)
