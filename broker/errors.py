"""Errors raised by the broker, numbered as SQL Server numbers them.

Every failure a user can meet is a :class:`BrokerError` whose ``number`` is the SQL
Server error number where one exists, so that code ported from T-SQL can branch on the
same numbers (``except BrokerError as e: if e.number == 8426: ...``). Failures SQL Server
has no number for take one of the project's own, from 59000 to 59999 (``docs/errors.md``
lists them). A bad argument is also a ``ValueError`` (:class:`InvalidArgumentError`) or a
``TypeError`` (:class:`ArgumentTypeError`), so either ``except`` style catches it.
"""

from __future__ import annotations

from typing import Any

# The project's own error numbers (59000-59999), listed in docs/errors.md.
NOT_FINITE = 59001
OUT_OF_RANGE = 59002
UNKNOWN_OPTION = 59003
MISSING_OPTION = 59004
REPEATED_HANDLE = 59005
NOT_AN_ERROR_BODY = 59006
INVALID_SCHEMA = 59007
EXTERNAL_SCHEMA_REFERENCE = 59008
DRIVER_MISSING = 59010
BAD_URL = 59011
DATABASE_FAILURE = 59020
SYSTEM_OBJECT = 59030
TRANSACTION_ENDED = 59040

# Texts follow SQL Server's wording (with its placeholders filled by keyword).
_TEXTS: dict[int, str] = {
    2714: "There is already an object named '{name}' in the database.",
    3701: "Cannot drop the {kind} '{name}', because it does not exist or you do not have permission.",
    8403: "The message type '{name}' is specified more than once.",
    8404: "The service contract '{name}' is specified more than once.",
    8406: "The dialog lifetime can not be NULL.",
    8410: "The conversation timer cannot be set beyond the conversation's lifetime.",
    8411: "The dialog lifetime value of {value} is outside the allowable range of 1 to 2147483647.",
    8412: "The syntax of the service name '{name}' is invalid.",
    8413: "The syntax of the broker instance '{name}' is invalid. The specified broker instance is too long, the maximum size is 256 bytes.",
    8418: "The conversation handle is missing. Specify a conversation handle.",
    8419: "Both the error code and the description must be provided for END CONVERSATION WITH ERROR. Neither value can be NULL.",
    8421: "The service name is missing. Specify a service name.",
    8422: "The error description is missing. Specify a description of the error.",
    8423: "The service \"{name}\" is not found.",
    8425: "The service contract '{name}' is not found.",
    8426: "The conversation handle \"{handle}\" is not found.",
    8427: "The conversation endpoint is not in a valid state for END CONVERSATION. The current endpoint state is '{state}'.",
    8428: "The message type \"{name}\" is not found.",
    8429: "The conversation endpoint is not in a valid state for SEND. The current endpoint state is '{state}'.",
    8431: "The message type '{name}' is not part of the service contract.",
    8432: "The message cannot be sent because the message type '{name}' is marked SENT BY TARGET in the contract, however this service is an Initiator.",
    8433: "The message body may not be NULL.  A zero-length UNICODE or binary string is allowed.",
    8434: "The message cannot be sent because the message type '{name}' is marked SENT BY INITIATOR in the contract, however this service is a Target.",
    8436: "The conversation group \"{group}\" is not found.",
    8438: "The conversation endpoint is not in a valid state for MOVE CONVERSATION. The current endpoint state is '{state}'.",
    8439: "The destination conversation group '{group}' is invalid.",
    8440: "The conversation group '{group}' does not belong to the queue '{queue}'.",
    8458: "The conversation endpoint is not in a valid state for BEGIN CONVERSATION TIMER. The current endpoint state is '{state}'.",
    8459: "The message size, including header information, exceeds the maximum allowed of 2147483647.",
    8492: "The contract '{name}' must have at least one message SENT BY INITIATOR or ANY.",
    8493: "The alter of service '{name}' must change the queue or at least one contract.",
    8494: "You do not have permission to access the service '{name}'.",
    8498: "The message type '{name}' is not part of the service contract '{contract}'.",
    9610: "The service '{name}' in the FROM SERVICE clause must match the service '{other}' referenced by {clause} = '{related}'.",
    9617: "The service queue \"{name}\" is currently disabled.",
    9618: "The message cannot be sent because the service queue '{name}' associated with the dialog is currently disabled and retention is on.",
    # Dependency errors on DROP (SQL Server reports these as 3729 "referenced by").
    3729: "Cannot drop {kind} '{name}' because it is being referenced by {ref_kind} '{ref_name}'.",
    # Names given to DDL.
    102: "Incorrect syntax near '{near}'.",
    103: "The identifier that starts with '{name}' is too long. Maximum length is 128.",
    15151: "Cannot find the {kind} '{name}', because it does not exist or you do not have permission.",
    # Arguments (the gate, ``broker.arguments``).
    206: "Operand type clash: {given} is incompatible with {expected} ({what}).",
    1014: "A TOP or FETCH clause contains an invalid value.",
    1038: "An object or column name is missing or empty ({what}).",
    1060: "The number of rows provided for a TOP or FETCH clauses row count parameter must be an integer.",
    TRANSACTION_ENDED: "The transaction has ended: a verb needs a transaction of its own (db.transaction()).",
    3708: "Cannot drop the {kind} '{name}' because it is a system {kind}.",
    5120: "Unable to open the physical file \"{path}\". {reason}",
    8115: "Arithmetic overflow error converting {what} to data type {type}.",
    9420: "XML parsing: {what} holds the character {char}, which XML 1.0 cannot carry.",
    # The project's own (SQL Server has no number for these).
    NOT_FINITE: "{what} must be a finite number; got {value}.",
    OUT_OF_RANGE: "{what} must be {rule}; got {value}.",
    UNKNOWN_OPTION: "{statement} has no option {names}; it takes {known}.",
    MISSING_OPTION: "{statement} needs {names}.",
    REPEATED_HANDLE: 'The conversation handle "{handle}" is specified more than once.',
    NOT_AN_ERROR_BODY: "Not the body of an Error message: {reason}",
    INVALID_SCHEMA: "The XML schema collection '{name}' is not valid: {reason}",
    EXTERNAL_SCHEMA_REFERENCE: (
        "The XML schema collection '{name}' refers to {reference}; a schema collection is self-contained "
        "and may not include or import schemas from files or URLs."
    ),
    DRIVER_MISSING: "The database driver {driver} is not installed: {hint}",
    BAD_URL: "Cannot use the database URL {url}: {reason}",
    DATABASE_FAILURE: "The database failed: {reason}",
    SYSTEM_OBJECT: "Cannot alter the {kind} '{name}' because it is a system {kind}.",
}


class BrokerError(Exception):
    """A Service Broker failure; ``number`` is SQL Server's error number or the project's own."""

    def __init__(self, number: int, message: str | None = None, **details: Any) -> None:
        self.number = number
        self.details = details
        if message is None:
            template = _TEXTS.get(number)
            message = template.format(**details) if template else f"Service Broker error {number}"
        self.message = message
        super().__init__(f"Msg {number}: {message}" if number else message)


class QueueDisabledError(BrokerError):
    """RECEIVE or GET CONVERSATION GROUP on a queue whose STATUS is OFF (9617)."""

    def __init__(self, name: str) -> None:
        super().__init__(9617, name=name)


class ConversationNotFoundError(BrokerError):
    """A conversation handle that does not exist in this database (8426)."""

    def __init__(self, handle: object) -> None:
        super().__init__(8426, handle=str(handle).upper())


class InvalidArgumentError(BrokerError, ValueError):
    """An argument of the right type with a value the verb cannot take."""


class ArgumentTypeError(BrokerError, TypeError):
    """An argument of a type the verb does not take (SQL Server's 206, or an unknown option)."""
