"""``completion``: a shell completion script (bash, zsh or fish), made from the parser."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from onebit_build.commands import Command

if TYPE_CHECKING:
    from onebit_build.core.project import ProjectRoot
    from onebit_build.commands._options import Options

COMMAND = Command(name="completion", help="print a shell completion script (bash, zsh or fish)", rank=90)
SHELLS = ("bash", "zsh", "fish")


def arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=SHELLS)


# Where completion gets its values: recipe names from the tool itself, folders and files.
RECIPE_NAMES = "onebit-build recipes --names 2>/dev/null"
DIR_OPTIONS = ("--workspace", "--root", "--mirror-dir", "--toolchain-root", "--prefix", "--run-dir", "--out", "--build")
FILE_OPTIONS = ("--model", "--junit", "--server", "--expect", "--reference", "--write-reference", "--working")


COMPLETION_KIND = "onebit-build-completion"


def run(opts: Options, project: ProjectRoot | None, cmd: Command) -> int:
    """A completion script for bash, zsh or fish, made by shtab from the parser itself:
    subcommands and their sub-actions, every option, recipe names after --recipe.

    The script is kept in the user's cache, keyed by the shell and the code it is made from
    (this package and shtab); the recipe names are not in it (the shell asks for them with
    'recipes --names' as it completes), so adding a recipe does not change it."""
    from onebit_build.core import usercache

    shell = opts.args.get("shell") or "bash"
    key = usercache.key_of(usercache.code_stamp(("shtab",)), shell)
    where = usercache.tool_dir(os.environ) / f"completion-{shell}.json"
    kept = usercache.read(where, COMPLETION_KIND, key)
    script = kept.get("script") if kept else None
    if not isinstance(script, str):
        script = completion_script(shell)
        usercache.write(where, COMPLETION_KIND, key, {"script": script})
    sys.stdout.write(script)
    return 0


def completion_script(shell: str) -> str:
    """The script made afresh from the parser."""
    # cli builds the parser and imports this module when the command runs: imported here.
    import shtab  # and shtab only for this command

    from onebit_build.commands.parser import make_parser

    return shtab.complete(completable(make_parser()), shell=shell)


def completable(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``parser`` with what each option completes to set on its actions (shtab reads it). The
    global options a command also takes stay out of its help, but not out of its completion."""
    import shtab

    for p in _parsers(parser):
        for action in p._actions:
            names = set(action.option_strings)
            if names and action.help == argparse.SUPPRESS:
                action.help = "global option: see onebit-build --help"
            if "--recipe" in names:
                action.complete = shtab.cmd(RECIPE_NAMES)
            elif names & set(DIR_OPTIONS):
                action.complete = shtab.DIRECTORY
            elif names & set(FILE_OPTIONS):
                action.complete = shtab.FILE
    return parser


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)
