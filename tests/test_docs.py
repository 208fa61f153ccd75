"""The exit codes the documents list are the ones the code gives: the error classes of
``core/errors.py`` own every code (and the CLI the 0 of success and the 130 of Ctrl-C)."""

from __future__ import annotations

import re
from pathlib import Path

from onebit_build import cli
from onebit_build.core import errors

REPO = Path(__file__).resolve().parent.parent


def codes_in_code() -> set[int]:
    """Every exit code the tool can end with."""
    seen, todo = set(), [errors.OnebitError]
    while todo:
        cls = todo.pop()
        seen.add(cls.exit_code)
        todo += cls.__subclasses__()
    return seen | {0, cli.INTERRUPTED}


def listed_codes(doc: Path) -> list[int]:
    """The codes of the document's 'Exit codes:' paragraph, in the order it lists them."""
    text = doc.read_text()
    start = text.index("Exit codes:")
    paragraph = text[start:text.index("\n\n", start)]
    return [int(n) for n in re.findall(r"(?:^|[:,] )(\d+) [a-z]", paragraph.replace("\n", " "))]


def test_the_listed_exit_codes_are_the_code_s():
    owned = codes_in_code()
    assert owned == {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 130}
    for doc in (REPO / "README.md", REPO / "docs" / "reliability.md"):
        listed = listed_codes(doc)
        assert set(listed) == owned and listed == sorted(listed), (doc.name, listed)


def test_every_exit_code_a_reliability_row_names_exists():
    text = (REPO / "docs" / "reliability.md").read_text()
    named = {int(n) for n in re.findall(r"exit (\d+)", text)}
    assert named and named <= codes_in_code(), named - codes_in_code()


def test_the_workspace_and_configuration_share_their_code():
    assert errors.WorkspaceError.exit_code == errors.ConfigError.exit_code == 2
    assert errors.ToolMissingError.exit_code == 7 and errors.BuildError.exit_code == 9
