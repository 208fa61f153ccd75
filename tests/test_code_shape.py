"""The package's shape: no module over 450 lines, no function over 50 (a method counts as a
function; a nested function counts on its own and also inside the function around it).
Pure: the files are parsed with ``ast``, nothing is imported or run."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "onebit_build"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 50



def function_lengths(source: str) -> dict[str, int]:
    """Qualified name (``Class.method``, ``outer.inner``) -> lines from ``def`` to the last line."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                out[name] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def modules() -> list[tuple[str, str]]:
    found = [(p.relative_to(PACKAGE).as_posix(), p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.rglob("*.py"))]
    assert len(found) > 50, f"too few modules under {PACKAGE}: the walk is wrong"
    return found


def long_functions() -> dict[str, int]:
    return {f"{rel}:{name}": n for rel, src in modules() for name, n in function_lengths(src).items()
            if n > MAX_FUNCTION_LINES}


def test_no_module_is_over_450_lines():
    long = {rel: len(src.splitlines()) for rel, src in modules() if len(src.splitlines()) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them): {long}"


def test_no_function_is_over_50_lines():
    long = long_functions()
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (split them): {long}"


def test_lengths_are_measured_from_def_to_last_line_with_methods_and_nested_functions():
    src = ("class A:\n    def m(self):\n        def inner():\n            return 1\n\n        return inner\n\n\n"
           "async def f():\n    pass\n")
    assert function_lengths(src) == {"A.m": 5, "A.m.inner": 2, "f": 2}
