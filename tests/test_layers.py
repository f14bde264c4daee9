"""The layers of ``broker/`` import only the layers below them (docs/architecture.md).

Every import counts, those made only for type checking included: a module that needs a
name from a layer above it is in the wrong layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BROKER = Path(__file__).resolve().parent.parent / "broker"

# Bottom to top. The leaves import nothing of the broker; every layer may use them.
LAYERS = {
    "errors": 0, "arguments": 0, "events": 0,
    "storage": 1,
    "routing": 2,
    "conversations": 3,
    "ddl": 4,
    "transport": 5,
    "runtime": 6,
    "database": 7, "inspection": 7, "transaction": 7, "instances": 7, "spark": 7, "__init__": 7,
    "sql": 8,  # the T-SQL face, over the Python API
}


def layer_of(module: str) -> int:
    """The layer of a dotted module name under ``broker``."""
    parts = module.split(".")
    assert parts[0] == "broker", module
    if len(parts) == 1:
        return LAYERS["__init__"]
    return LAYERS[parts[1]]


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every ``broker`` module ``path`` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "broker":
            if node.module == "broker":  # from broker import x: x is a module or a name of the face
                found += [(node.lineno, f"broker.{alias.name}" if alias.name in LAYERS else "broker")
                          for alias in node.names]
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "broker"]
    return found


def module_name(path: Path) -> str:
    relative = path.relative_to(BROKER.parent).with_suffix("")
    return ".".join(relative.parts)


MODULES = sorted(BROKER.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_a_module_imports_only_its_own_layer_and_those_below(path: Path) -> None:
    own = layer_of(module_name(path))
    upward = [f"line {line}: {module}" for line, module in imports_of(path) if layer_of(module) > own]
    assert upward == []


def test_the_top_of_broker_holds_only_the_face_and_the_leaves() -> None:
    top = sorted(p.stem for p in BROKER.glob("*.py"))
    assert top == sorted(name for name in LAYERS if (BROKER / f"{name}.py").exists())
    assert len(top) <= 10
