"""Command line: parses the arguments into ``Options`` and hands them to one function per
subcommand. Exit codes come from the error classes (README, "Exit codes")."""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from onebit_build.commands import Command, by_name, commands
from onebit_build.commands.parser import make_parser
from onebit_build.core import ui
from onebit_build.core.errors import INTERRUPTED, ConfigError, OnebitError, SpaceError, WorkspaceError, is_disk_full
from onebit_build.core.project import find_root

if TYPE_CHECKING:  # for the annotations only: the module itself is imported where it runs
    from onebit_build.commands._options import Options
    from onebit_build.spec.defines import DefineSyntaxError


def refuse_unused_flags(opts: Options, cmd: Command) -> None:
    """A global flag is honoured by every command or refused (exit 2), never ignored."""
    given = {"--dry-run": (opts.dry_run and cmd.name != "plan", "dry_run"),
             "--model": (opts.model is not None, "takes_model"), "--fresh": (opts.fresh, "builds"),
             "--signing-key": (opts.signing_key is not None, "builds")}
    for flag, (is_given, attr) in given.items():
        if is_given and not getattr(cmd, attr):
            users = [c.name for c in commands() if getattr(c, attr)]
            raise ConfigError(f"{flag} is not taken by '{cmd.name}'",
                              hint=f"drop it; it applies to: {', '.join(users)}")
    for other, is_given in (("--server", opts.server is not None), ("--dry-run", opts.dry_run)):
        if opts.fresh and is_given:  # nothing is built then, so nothing would start over
            raise ConfigError(f"--fresh is not taken with {other}: nothing is built", hint="drop one of the two")


def dispatch(opts: Options) -> int:
    cmd = by_name(opts.command)
    refuse_unused_flags(opts, cmd)
    project = None if cmd.name == "completion" else find_root(given=opts.root, env=os.environ, cwd=Path.cwd())
    if opts.dry_run:
        return by_name("plan").runner()(opts, project, cmd)
    return cmd.runner()(opts, project, cmd)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    ns = make_parser(args).parse_args(args)
    ui.set_verbose(bool(ns.__dict__.get("verbose")))
    ui.set_quiet(bool(ns.__dict__.get("quiet")))
    # SIGTERM takes the same path as Ctrl-C, so that every stage cleans up the same way.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        if ns.version:
            return version(ns)
        # The options module is imported once the arguments are parsed and --version answered:
        # --help stops before, with only the command table and argparse imported.
        from onebit_build.commands._options import from_args
        from onebit_build.spec.defines import DefineSyntaxError

        try:
            return dispatch(from_args(ns))
        except DefineSyntaxError as exc:
            return report_error(define_error_with_examples(exc, ns))
    except KeyboardInterrupt:
        ui.error("interrupted; partial outputs were removed, the next run starts cleanly")
        return INTERRUPTED
    except (OnebitError, OSError) as exc:
        return report_error(exc if isinstance(exc, OnebitError) else os_error(exc))


def report_error(err: OnebitError) -> int:
    """Print ``err`` as one line (its detail indented below, the traceback with -v); its exit code."""
    ui.error(str(err))
    if err.detail:
        ui.block("  | " + line for line in err.detail.splitlines())
    if ui.is_verbose():
        traceback.print_exc()
    return err.exit_code


def define_error_with_examples(exc: DefineSyntaxError, ns: argparse.Namespace) -> OnebitError:
    """The malformed ``-D`` error, its hint made of overrides that the chosen recipe accepts
    (the generic hint stays when the recipe itself cannot be read)."""
    # The job model (YAML, pins) is imported only on this error path: --help stays cheap.
    from onebit_build.commands import _options as options
    from onebit_build.job.job import load_pins_and_recipe
    from onebit_build.spec.defines import define_examples

    get = ns.__dict__.get
    try:
        project = find_root(given=get("root"), env=os.environ, cwd=Path.cwd())
        _, recipe = load_pins_and_recipe(project, options.recipe_choice(recipe=get("recipe"), hrx=get("hrx")))
    except OnebitError:
        return exc
    examples = define_examples(recipe)
    if examples:
        exc.hint = "e.g. " + " or ".join(examples)
    return exc


def version(ns: argparse.Namespace) -> int:
    from onebit_build.commands._version import version as show

    try:
        return show(find_root(given=ns.__dict__.get("root"), env=os.environ, cwd=Path.cwd()))
    except ConfigError as exc:
        return show(None, exc)


def os_error(exc: OSError) -> OnebitError:
    """A typed error for an OSError no stage foresaw (disk full, permission, read-only). Pure."""
    where = f" at {exc.filename}" if exc.filename else ""
    if is_disk_full(exc):
        return SpaceError(f"no space left on device{where}",
                          hint="free some space or use another --workspace, then run again")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return WorkspaceError(f"{exc.strerror}{where}",
                              hint="fix its permissions, or choose a writable folder for the option that named it")
    if exc.errno == errno.ENAMETOOLONG:
        return WorkspaceError(f"file name too long{where}", hint="a name may hold 255 bytes and a path 4096: give a"
                                                                 " shorter --workspace, --run-dir or --out")
    return OnebitError(f"{exc.strerror or exc}{where}", hint="run again with -v for the details")


def entry() -> None:
    sys.exit(main())
