"""The package's shape as its source says it: no import circle of any kind, one definition per
class name, and the command line's options read by the commands alone.

Read with ``ast``, nothing imported: every import counts, at the top, inside a function or
under ``if TYPE_CHECKING`` (a type-only circle is a circle of the design all the same)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "onebit_build"
TOP = PACKAGE.name


def module_name(path: Path) -> str:
    """``onebit_build/job/run.py`` -> ``onebit_build.job.run``; a package is its folder's name. Pure."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its text: a name taken from a
    package counts as its submodule when there is one, else as the package itself."""
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                base = f"{anchor}.{base}" if base else anchor
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imported(name, path, set(mods)) for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each circle of ``graph`` once, as the path that closes it (first module repeated at the
    end), found by a depth-first search. Pure."""
    found: list[list[str]] = []
    seen_sets: set[frozenset[str]] = set()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                loop = path[path.index(nxt):] + [nxt]
                if frozenset(loop) not in seen_sets:
                    seen_sets.add(frozenset(loop))
                    found.append(loop)
            elif nxt not in state:
                visit(nxt, path)
        path.pop()
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [])
    return found


def test_the_cycle_finder_names_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    # job/run.py imports the stages at its top; commands import the pipeline inside their run function
    assert "onebit_build.job.build" in graph["onebit_build.job.run"]
    assert "onebit_build.job.run" in graph["onebit_build.commands.serve"]


def test_the_package_has_no_import_circle():
    found = cycles(import_graph())
    assert not found, "import circles (a -> b means a imports b):\n" + "\n".join(" -> ".join(c) for c in found)


def test_each_class_name_is_defined_once():
    where: dict[str, list[str]] = {}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(name)
    twice = {cls: mods for cls, mods in where.items() if len(mods) > 1}
    assert not twice, f"class names defined more than once (give each its meaning's name): {twice}"


def test_only_the_commands_read_the_command_line_options():
    """Below the command modules, the job and the floors read Settings and the Plan; the
    parsed options (commands/_options.py) stay with the command line."""
    options = f"{TOP}.commands._options"
    readers = sorted(name for name, deps in import_graph().items()
                     if options in deps and not name.startswith(f"{TOP}.commands") and name != f"{TOP}.cli")
    assert not readers, f"{options} imported below the commands by: {readers}"



def test_the_artifact_kinds_a_recipe_may_name_are_the_collected_ones():
    """A recipe's ``artifacts:`` names are checked at load against the recipe schema's list;
    each must have its facts and collector, and no collector may be out of a recipe's reach."""
    from onebit_build.checking.artifacts import KINDS
    from onebit_build.spec.recipe import KNOWN_COLLECTORS

    assert set(KINDS) == set(KNOWN_COLLECTORS)


def test_the_stages_are_entered_from_job_run_alone():
    """The stage order and the choice between the binary cache and a build have one owner:
    only job/run.py calls a stage (``*_stage``) or the pull (``from_binary_cache``)."""
    entries = {"fetch_stage", "patch_stage", "build_stage", "verify_stage", "smoke_stage", "from_binary_cache"}
    callers = []
    for name, path in modules().items():
        if name == f"{TOP}.job.run":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if called in entries:
                    callers.append(f"{name}: {called}")
    assert not callers, f"stages entered outside job/run.py: {callers}"
