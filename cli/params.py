"""Option types named like T-SQL clause values: ``on|off``, a priority level, EXECUTE AS."""

from __future__ import annotations

from typing import Any

import click


class OnOff(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """``on`` / ``off`` (any case) as a bool, like ``STATUS = ON`` in T-SQL."""

    name = "on|off"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> bool:
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text not in ("on", "off"):
            self.fail(f"{value!r} is not 'on' or 'off'", param, ctx)
        return text == "on"


ON_OFF = OnOff()


class PriorityLevel(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """An integer or ``DEFAULT`` (any case), like ``PRIORITY_LEVEL = 8`` in T-SQL.

    The range (1 to 10) is the library's to check.
    """

    name = "level"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if isinstance(value, int):
            return value
        text = str(value)
        if text.upper() == "DEFAULT":
            return "DEFAULT"
        try:
            return int(text)
        except ValueError:
            self.fail(f"{value!r} is not a number or DEFAULT", param, ctx)


PRIORITY_LEVEL = PriorityLevel()


class ExecuteAs(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """``SELF`` or ``OWNER`` (any case, stored upper-case) or a user name, as in
    ``EXECUTE AS { SELF | OWNER | 'user_name' }``."""

    name = "SELF|OWNER|USER"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not text:
            self.fail("give SELF, OWNER or a user name", param, ctx)
        return text.upper() if text.upper() in ("SELF", "OWNER") else text


EXECUTE_AS = ExecuteAs()
