"""What the parser's builders share: identifiers and literals as written, the children
of a grammar rule sorted out, and the base of the tree-to-``nodes`` transformer."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lark import Token, Transformer, v_args

from broker.sql import nodes as n


def unquote(token: str) -> str:
    """An identifier as written: ``[a]]b]`` is ``a]b``, ``"x""y"`` is ``x"y``."""
    if token.startswith("["):
        return token[1:-1].replace("]]", "]")
    if token.startswith('"'):
        return token[1:-1].replace('""', '"')
    return token


def string_text(token: str) -> str:
    start = token.index("'")
    return token[start + 1:-1].replace("''", "'")


def token_kinds(children: list[Any]) -> set[str]:
    return {child.type for child in children if isinstance(child, Token)}


def non_keywords(children: list[Any]) -> list[Any]:
    """The children that are not keywords: names, expressions, nodes (``None`` placeholders kept)."""
    return [child for child in children if not (isinstance(child, Token) and child.type not in ("VARIABLE",))]


def present(children: list[Any]) -> list[Any]:
    return [child for child in non_keywords(children) if child is not None]


def of_type(children: list[Any], kind: type) -> list[Any]:
    return [child for child in children if isinstance(child, kind)]


class Name(str):
    """An identifier (unquoted); a ``str`` that the builder can tell from an expression."""


class ObjectName(tuple[str, ...]):
    pass


@dataclass(frozen=True)
class Clause:
    """A part of a statement built by a rule of its own (a SELECT's WHERE ...), by name."""
    name: str
    value: Any


def line_of(meta: Any, offset: int) -> int:
    return (getattr(meta, "line", 1) or 1) + offset


def statement(method: Callable[..., n.Statement]) -> Callable[..., n.Statement]:
    """Transformer method for a statement: stamps the statement's line."""
    @v_args(meta=True)
    @functools.wraps(method)
    def build(self: Builder, meta: Any, children: list[Any]) -> n.Statement:
        node = method(self, children, meta)
        node.line = line_of(meta, self.offset)
        return node
    return build


class Builder(Transformer[Token, Any]):
    """The base of the tree-to-``nodes`` transformer: the batch's text and the line its
    first line is in the script (``offset``)."""

    def __init__(self, text: str, offset: int) -> None:
        super().__init__()
        self.text = text
        self.offset = offset
