"""T-SQL's LIKE under the default case-insensitive collation, matched without
backtracking."""

from __future__ import annotations

from typing import Any, NamedTuple

from broker.sql.values import text_of


def like(value: Any, pattern: Any) -> bool | None:
    """``value LIKE pattern`` under the case-insensitive collation: ``%``, ``_``, ``[abc]``,
    ``[a-c]`` and ``[^...]``; the value's trailing blanks are ignored, the pattern's are
    not. Matched without backtracking (time linear in value times pattern), so a pattern
    of many ``%`` cannot stall a script on a long value, as a regular expression would."""
    if value is None or pattern is None:
        return None
    tokens = _like_tokens(text_of(pattern))
    text = text_of(value).rstrip(" ")
    position = step = 0
    star, resume = -1, 0
    while position < len(text):
        if step < len(tokens) and tokens[step] is not _ANY_RUN and _fits(tokens[step], text[position]):
            position, step = position + 1, step + 1
        elif step < len(tokens) and tokens[step] is _ANY_RUN:
            star, resume, step = step, position, step + 1
        elif star != -1:  # let the last % take one more character, and go on after it
            resume += 1
            position, step = resume, star + 1
        else:
            return False
    return all(token is _ANY_RUN for token in tokens[step:])


_ANY_RUN = object()  # %
_ANY_ONE = object()  # _


class _CharSet(NamedTuple):
    """A pattern's [set] or [^set]: casefolded bounds of its characters and ranges."""

    negated: bool
    ranges: tuple[tuple[str, str], ...]


_LikeToken = object | str | _CharSet  # one character of a pattern: %, _, a casefolded character, a set


def _like_tokens(pattern: str) -> list[_LikeToken]:
    tokens: list[_LikeToken] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        end = pattern.find("]", index + 1) if char == "[" else -1
        if char == "%":
            if not tokens or tokens[-1] is not _ANY_RUN:
                tokens.append(_ANY_RUN)
        elif char == "_":
            tokens.append(_ANY_ONE)
        elif end != -1:
            body = pattern[index + 1:end]
            negated = body.startswith("^")
            tokens.append(_CharSet(negated, _ranges(body[1:] if negated else body)))
            index = end
        else:
            tokens.append(char.casefold())
        index += 1
    return tokens


def _ranges(body: str) -> tuple[tuple[str, str], ...]:
    """The characters of a [set]: single ones and ranges ``a-c`` (a '-' first or last is itself)."""
    ranges: list[tuple[str, str]] = []
    index = 0
    while index < len(body):
        low = body[index].casefold()
        if index + 2 < len(body) and body[index + 1] == "-":
            ranges.append((low, body[index + 2].casefold()))
            index += 3
        else:
            ranges.append((low, low))
            index += 1
    return tuple(ranges)


def _fits(token: _LikeToken, char: str) -> bool:
    if token is _ANY_ONE:
        return True
    folded = char.casefold()
    if isinstance(token, str):
        return folded == token
    assert isinstance(token, _CharSet)
    return any(low <= folded <= high for low, high in token.ranges) != token.negated
