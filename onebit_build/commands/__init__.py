"""The commands: one module each in this package, found by looking, not listed anywhere.

A command module defines ``COMMAND`` (a ``Command``: its name, help and what it takes),
``run(opts, project, cmd) -> int`` (its body) and, when it has options of its own,
``arguments(parser)``. Dropping such a module here adds the command to ``--help``, to the
parser and to shell completion; nothing else needs to change. Modules whose name starts with
``_`` and modules without ``COMMAND`` are helpers, not commands.

Command modules import only argparse, dataclasses and this package at their top: the
pipeline is imported inside ``run``, so that ``--help``, ``--version``, ``recipes`` and
``completion`` stay quick (tests/test_startup.py holds that).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

from onebit_build.job.stage import Stage


@dataclass(frozen=True, kw_only=True)
class Command:
    name: str
    help: str
    rank: int = 100  # its place in --help and completion: lower first, then by name
    until: Stage | None = None  # a job: the last stage it runs
    skip: frozenset[Stage] = frozenset()  # a job: stages it leaves out
    dry_run: bool = False  # takes --dry-run: prints the plan of its job instead
    json: str | None = None  # takes --json: what it prints then
    git: bool = False  # fetches or patches sources
    writes_project: bool = False  # writes pins.lock or patches/ (a checkout only)
    action: str | None = None  # its sub-action when it has exactly one ('patches export')
    takes_model: bool = False  # uses --model
    module: ModuleType | None = None  # set when found: the module holding it

    @property
    def builds(self) -> bool:
        """Its job runs the build stage (so it takes --fresh)."""
        return self.until is not None and self.until >= Stage.BUILD

    def runner(self) -> Callable[..., int]:
        assert self.module is not None, f"command {self.name} was not found in a module"
        return self.module.run

    def add_arguments(self, parser) -> None:
        adder = getattr(self.module, "arguments", None)
        if adder is not None:
            adder(parser)


def module_name(command: str) -> str:
    """The module of a command: its name with '_' for '-'. Pure."""
    return command.replace("-", "_")


_FOUND: tuple[Command, ...] | None = None


def commands() -> tuple[Command, ...]:
    """Every command of this package, in the order --help lists them."""
    global _FOUND
    if _FOUND is None:
        found = []
        for info in pkgutil.iter_modules(__path__):
            if info.name.startswith("_"):
                continue
            module = importlib.import_module(f"{__name__}.{info.name}")
            declared = getattr(module, "COMMAND", None)
            if isinstance(declared, Command):
                if module_name(declared.name) != info.name:
                    raise RuntimeError(f"module {info.name} declares command {declared.name!r}: name one after the"
                                       " other")
                found.append(Command(**{**declared.__dict__, "module": module}))
        _FOUND = tuple(sorted(found, key=lambda c: (c.rank, c.name)))
    return _FOUND


def by_name(name: str) -> Command:
    return next(c for c in commands() if c.name == name)

