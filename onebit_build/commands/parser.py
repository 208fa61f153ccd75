"""The parser, made from the command modules: each command with its help and its options; a
command that does not exist is answered in one line with the closest ones."""

from __future__ import annotations

import argparse
from typing import Sequence

from onebit_build.commands import arguments, commands
from onebit_build.core import ui
from onebit_build.core.errors import ConfigError, exit_codes_sentence


# Words people type for a command the tool calls otherwise.
COMMAND_SYNONYMS = {"list": "recipes", "ls": "builds", "run": "all", "clean": "gc", "rm": "gc", "status": "builds",
                    "test": "smoke", "check": "doctor", "info": "plan", "show": "plan", "help": "--help"}


def unknown_command(name: str, known: Sequence[str]) -> str:
    """One line for a command that does not exist, with the closest ones. Pure."""
    import difflib

    guesses = list(dict.fromkeys([*([COMMAND_SYNONYMS[name]] if name in COMMAND_SYNONYMS else []),
                                  *difflib.get_close_matches(name, known, n=2, cutoff=0.6)]))
    shown = name if name.isprintable() else ascii(name)[1:-1]
    hint = f"did you mean {' or '.join(repr(g) for g in guesses)}? " if guesses else ""
    return f"'{shown[:60]}' is not a command; {hint}'onebit-build --help' lists them all"


class Parser(argparse.ArgumentParser):
    """argparse, with a command that does not exist answered in one line and exit 2."""

    def error(self, message: str):  # type: ignore[override]
        import re

        m = re.match(r"argument COMMAND: invalid choice: '(.*)' \(choose from", message)
        if m:
            ui.error(unknown_command(m.group(1), [c.name for c in commands()]))
            raise SystemExit(ConfigError.exit_code)
        super().error(message)


def make_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser, built from the command modules: each command with its help and options.

    Given the ``argv`` it is to parse, only the commands named in it get their options: the
    chosen command is always among them, and the others stay bare (the top-level help and the
    list of choices show only their names and help), which saves most of the building at
    start-up. The parse of ``argv`` and every help text are those of the whole parser."""
    named = None if argv is None else set(argv)
    p = Parser(prog="onebit-build",
                                description="Fetch pinned sources, apply patches, build llama-server, "
                                            "verify and smoke-test it.",
                                epilog="Global options go before or after the command. "
                                       "'onebit-build COMMAND --help' shows a"
                                       " command's own options. " + exit_codes_sentence())
    p.add_argument("--version", action="store_true",
                   help="print the version, the digest of pins.yaml and where the recipes come from")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan of the default job and stop (as 'onebit-build plan')")
    arguments.global_options(p, listed=True)
    # The global options a command takes after its name: made once, shared by every command
    # parser (as a parent), rather than added to each of them again.
    after = argparse.ArgumentParser(add_help=False)
    arguments.global_options(after, listed=False)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for cmd in commands():
        if named is not None and cmd.name not in named:
            sub.add_parser(cmd.name, help=cmd.help)
            continue
        sp = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help,
                            parents=[after] if cmd.action is None else [],
                            epilog="Global options (--recipe, -D, --workspace, -j, -v, -q, ...): "
                                   "see onebit-build --help.")
        if cmd.dry_run:
            sp.add_argument("--dry-run", action="store_true", default=argparse.SUPPRESS,
                            help="print the plan and stop; no network, no build")
        if cmd.json:
            sp.add_argument("--json", action="store_true", help=cmd.json)
        cmd.add_arguments(sp)
    return p
