"""The exit codes: one table in ``core/errors.py`` (code -> meaning), each code with one owner
(an error class, or the CLI's success and Ctrl-C), and the documents say that table."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import onebit_build
from onebit_build.core import errors

REPO = Path(__file__).resolve().parent.parent


def owners() -> dict[int, list[str]]:
    """Exit code -> the error classes that set it (a subclass that keeps its parent's code is a
    kind of the same failure); success and Ctrl-C belong to the CLI. Every module is imported,
    so that an error class anywhere in the package is seen."""
    for mod in pkgutil.walk_packages(onebit_build.__path__, "onebit_build."):
        if not mod.name.endswith("__main__"):
            importlib.import_module(mod.name)
    out: dict[int, list[str]] = {errors.SUCCESS: ["cli"], errors.INTERRUPTED: ["cli"]}
    seen, todo = set(), [errors.OnebitError]
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.add(cls)
            if "exit_code" in vars(cls):
                out.setdefault(cls.exit_code, []).append(cls.__name__)
            todo += cls.__subclasses__()
    return out


def paragraph(doc: Path) -> str:
    """The document's 'Exit codes:' paragraph, on one line."""
    text = doc.read_text()
    start = text.index("Exit codes:")
    return " ".join(text[start:text.index("\n\n", start)].split())


def test_every_code_has_one_owner_and_one_meaning():
    found = owners()
    assert {code: who for code, who in found.items() if len(who) > 1} == {}
    assert sorted(found) == sorted(errors.EXIT_CODES), "a code without a meaning in EXIT_CODES, or one nobody gives"
    meanings = list(errors.EXIT_CODES.values())
    assert len(set(meanings)) == len(meanings)
    assert not any(" or unusable" in m or "workspace or box" in m for m in meanings)


def test_the_documents_say_the_table():
    sentence = errors.exit_codes_sentence()
    assert sentence.startswith("Exit codes: 0 success, 1 unexpected error, 2 usage or configuration")
    assert sentence.endswith(", 15 box in use (a benchmark or verification holds the bench lock), 16 this system"
                             " cannot run the build (a library or symbol version its programs need is missing),"
                             " 130 interrupted.")
    for doc in (REPO / "README.md", REPO / "docs" / "reliability.md"):
        assert paragraph(doc).startswith(sentence), (doc.name, paragraph(doc), sentence)


def test_every_exit_code_a_reliability_row_names_exists():
    text = (REPO / "docs" / "reliability.md").read_text()
    named = {int(n) for n in re.findall(r"exit (\d+)", text)}
    assert named and named <= set(errors.EXIT_CODES), named - set(errors.EXIT_CODES)


def test_the_workspace_the_box_and_configuration_each_have_their_code():
    assert (errors.ConfigError.exit_code, errors.LockError.exit_code, errors.WorkspaceError.exit_code,
            errors.BoxLockError.exit_code) == (2, 3, 14, 15)
    assert errors.ToolMissingError.exit_code == 7 and errors.BuildError.exit_code == 9
