"""The XML type's methods in T-SQL: ``.value()``, ``.query()`` and ``.exist()``, XPath
1.0 with XQuery's namespace prolog as scripts write it."""

from __future__ import annotations

import re
from typing import Any

from lxml import etree

from broker.sql.errors import SqlError
from broker.sql.values import Xml, as_xml, convert, sql_type, text_of


def xml_value(xml: Any, path: Any, type_text: Any) -> Any:
    """``xml.value('(/a)[1]', 'nvarchar(100)')``: the first node the XPath selects, as that type."""
    if xml is None:
        return None
    target = sql_type(text_of(type_text))
    found = _select(xml, path)
    if not found:
        return None
    first = found[0]
    text = first if isinstance(first, str) else (first.xpath("string()") if hasattr(first, "xpath") else str(first))
    return convert(str(text), target)


def xml_query(xml: Any, path: Any) -> Xml | None:
    if xml is None:
        return None
    found = _select(xml, path)
    return Xml("".join(etree.tostring(item, encoding="unicode") if hasattr(item, "tag") else str(item)
                       for item in found))


def xml_exist(xml: Any, path: Any) -> int | None:
    if xml is None:
        return None
    return 1 if _select(xml, path) else 0


# XQuery's prolog, as scripts read Service Broker's Error messages with it:
# declare namespace brokerns="http://schemas.microsoft.com/SQL/ServiceBroker/Error";
_DECLARE_NAMESPACE = re.compile(r"\s*declare\s+namespace\s+([A-Za-z_][\w.-]*)\s*=\s*(['\"])(.*?)\2\s*;", re.DOTALL)
_ANY_NAMESPACE = re.compile(r"\*:([A-Za-z_][\w.-]*)")  # *:Code, which XPath 1.0 spells with local-name()


def _select(xml: Any, path: Any) -> list[Any]:
    document = xml if isinstance(xml, Xml) else as_xml(xml)
    if not document.text.strip():
        return []
    query, namespaces = text_of(path), {}
    while (declared := _DECLARE_NAMESPACE.match(query)) is not None:
        namespaces[declared.group(1)] = declared.group(3)
        query = query[declared.end():]
    query = _ANY_NAMESPACE.sub(lambda name: f"*[local-name()='{name.group(1)}']", query)
    try:
        result = etree.ElementTree(document.tree()).xpath(query, namespaces=namespaces)
    except etree.XPathError as exc:
        raise SqlError(2389, f"XQuery [value()]: {exc}") from None
    if isinstance(result, list):
        return result
    if isinstance(result, bool):
        return [str(int(result))] if result else []
    if isinstance(result, float) and result.is_integer():
        return [str(int(result))]  # count(...) is 2, not '2.0', which no integer type reads
    return [str(result)]
