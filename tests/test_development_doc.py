"""docs/development.md stays true to the code: every module, folder and file it names exists,
and every name it gives in backticks (a function, a class, a constant, a field, ``Class.member``
or a module's dotted path) is defined in the package or the tests.

A name that is gone (a constant renamed, a module moved) fails here with the line that gives it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "onebit_build"
DOC = REPO / "docs" / "development.md"
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
ENV = re.compile(r"[A-Z][A-Z0-9_]+")
PLACEHOLDER = re.compile(r"[A-Z][A-Z_]*(\.[a-z]+)?")  # recipes/NAME.yaml
FILE_END = (".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".json", ".lock", ".sh", ".cfg")


def backticked(text: str) -> list[tuple[int, str]]:
    """(line number, text) of each inline code span outside the fenced blocks. Pure."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out += [(number, m.group(1)) for m in re.finditer(r"`([^`]+)`", line)]
    return out


def defined_names() -> set[str]:
    """Every name the package and the tests define or import: functions, classes, assigned
    names and attributes, fields, parameters, the environment variables they read (a string
    in capitals), and every module's and package's name."""
    names: set[str] = set()
    files = [*PACKAGE.rglob("*.py"), *(REPO / "tests").glob("*.py")]
    for path in files:
        names.add(path.stem if path.name != "__init__.py" else path.parent.name)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and ENV.fullmatch(node.value):
                names.add(node.value)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    for sub in ast.walk(target):
                        if isinstance(sub, ast.Name):
                            names.add(sub.id)
                        elif isinstance(sub, ast.Attribute):
                            names.add(sub.attr)
    return names


def markers() -> set[str]:
    """The pytest markers pyproject.toml declares."""
    text = (REPO / "pyproject.toml").read_text()
    return set(re.findall(r'^\s*"([a-z_]+)[:(]', text.split("markers = [", 1)[1].split("]", 1)[0], re.M))


def path_exists(text: str) -> bool:
    """A path the document gives: inside the package first, else from the repository's root;
    a bare file name anywhere in the package or the tests."""
    bases = (PACKAGE, REPO)
    text = "/".join("*" + (PLACEHOLDER.fullmatch(s).group(1) or "") if PLACEHOLDER.fullmatch(s) else s
                    for s in text.split("/"))
    if "*" in text:
        return any(any(base.glob(text)) for base in bases)
    if "/" not in text.rstrip("/"):
        return text.rstrip("/") in {p.name for p in (*PACKAGE.rglob("*"), *(REPO / "tests").glob("*"), *REPO.glob("*"))}
    return any((base / text).exists() for base in bases)


def problems(text: str, names: set[str]) -> list[str]:
    found = []
    for number, code in backticked(text):
        if "<" in code or " " in code or code.startswith(("-", "$", "~")):
            continue  # a pattern, a command line, an option, a variable or a user's folder, not a name
        if code.endswith("/") or code.endswith(FILE_END) or "/" in code:
            if not path_exists(code):
                found.append(f"line {number}: {code} does not exist")
        elif IDENT.fullmatch(code):
            missing = [part for part in code.split(".") if part not in names]
            if missing:
                found.append(f"line {number}: {code} ({', '.join(missing)} defined nowhere)")
    return found


def test_the_checker_sees_a_name_that_is_gone():
    names = {"KINDS", "run", "job"}
    doc = "a `KINDS` b `CANONICAL_PATH_ARTIFACTS` c `job/run.py` d `job/gone.py`\n```\n`NOT_READ`\n```\n"
    assert problems(doc, names) == ["line 1: CANONICAL_PATH_ARTIFACTS (CANONICAL_PATH_ARTIFACTS defined nowhere)",
                                    "line 1: job/gone.py does not exist"]


def test_every_module_and_name_development_md_gives_exists():
    found = problems(DOC.read_text(), defined_names() | markers())
    assert not found, "docs/development.md names what the code does not have:\n" + "\n".join(found)
