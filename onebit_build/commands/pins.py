"""``pins lock``: resolve abbreviated pins and record them in pins.lock. ``pins bump``: move a
pin (or a coupled pair) to a new commit only when the new build passes every gate."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from onebit_build.commands import Command

if TYPE_CHECKING:
    from onebit_build.core.project import ProjectRoot
    from onebit_build.commands._options import Options

COMMAND = Command(name="pins", help="pin tools", rank=60, git=True, writes_project=True, action="lock")

SHA = re.compile(r"^[0-9a-f]{40}$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def arguments(p: argparse.ArgumentParser) -> None:
    from onebit_build.commands.arguments import global_options, positive_int, run_folder_options

    sub = p.add_subparsers(dest="pins_command", metavar="ACTION", required=True)
    lk = sub.add_parser("lock", help="resolve abbreviated pins and record them in pins.lock")
    global_options(lk, listed=False)
    lk.add_argument("sources", nargs="*", help="only these sources (default: all abbreviated pins)")
    bp = sub.add_parser("bump", help="move a pin to a new commit when the new build passes fetch, patches, build,"
                        " verify, smoke and bench; pins untouched otherwise")
    global_options(bp, listed=False)
    bp.add_argument("bump_source", metavar="SOURCE", help="the pin to move (a source of pins.yaml)")
    bp.add_argument("--to", dest="bump_to", metavar="COMMIT", help="the full 40-hex commit to move it to")
    bp.add_argument("--to-sdist", dest="bump_sdist", metavar="NAME==VERSION",
                    help="the version of the pin's sdist mirror to move to (the commit it carries)")
    bp.add_argument("--with", dest="bump_with", metavar="OTHER=COMMIT", action="append",
                    help="move another pin with it, as a coupled pair (repeatable)")
    bp.add_argument("--rounds", dest="bump_rounds", metavar="N", type=positive_int, default=3,
                    help="bench rounds of old against new (default 3)")
    bp.add_argument("--tie-margin", dest="bump_tie_margin", metavar="NATS", type=float,
                    help="the bench excuses a greedy token of the new build that was the old build's runner-up within"
                         " this many nats (default 0.25: two commits may sum in another order)")
    bp.add_argument("--json", action="store_true", help="print the report as JSON (schema 1)")
    run_folder_options(bp, junit=False)


@dataclass(frozen=True, kw_only=True)
class BumpOptions:
    source: str
    to: str | None
    sdist: tuple[str, str] | None
    coupled: tuple[tuple[str, str], ...]
    rounds: int
    tie_margin: float


def _commit(text: str, what: str) -> str:
    from onebit_build.core.errors import ConfigError

    if not SHA.match(text.lower()):
        raise ConfigError(f"{what} {text!r} is not a full commit SHA", hint="give all 40 hex digits of the commit")
    return text.lower()


def bump_options(args: Mapping[str, Any]) -> BumpOptions:
    """The options of ``pins bump``, each checked. Pure."""
    from packaging.version import InvalidVersion, Version

    from onebit_build.core.errors import ConfigError

    source = str(args["bump_source"])
    if not NAME.match(source):
        raise ConfigError(f"{source!r} is not a source name", hint="name a source of pins.yaml")
    to = _commit(args["bump_to"], "--to") if args.get("bump_to") else None
    sdist = None
    if args.get("bump_sdist"):
        name, sep, version = str(args["bump_sdist"]).partition("==")
        try:
            ok = bool(sep) and bool(NAME.match(name.strip())) and str(Version(version.strip())) == version.strip()
        except InvalidVersion:
            ok = False
        if not ok:
            raise ConfigError(f"--to-sdist {args['bump_sdist']!r} is not NAME==VERSION",
                              hint="e.g. --to-sdist llama-cpp-python==0.3.36")
        sdist = (name.strip(), version.strip())
    if to is None and sdist is None:
        raise ConfigError("pins bump needs --to COMMIT or --to-sdist NAME==VERSION", hint="say where the pin goes")
    coupled = []
    for item in args.get("bump_with") or ():
        other, sep, commit = str(item).partition("=")
        if not sep or not NAME.match(other) or other == source or other in dict(coupled):
            raise ConfigError(f"--with {item!r} is not OTHER=COMMIT naming another source once",
                              hint="e.g. --with hrx-system=<40-hex commit>")
        coupled.append((other, _commit(commit, f"--with {other}")))
    from onebit_build.workflows.bump import TIE_MARGIN

    margin = TIE_MARGIN if args.get("bump_tie_margin") is None else float(args["bump_tie_margin"])
    if not 0 <= margin <= 5:  # nan and inf too
        raise ConfigError(f"--tie-margin {margin!r} is not between 0 and 5 nats", hint="e.g. --tie-margin 0.25")
    return BumpOptions(source=source, to=to, sdist=sdist, coupled=tuple(coupled), rounds=int(args.get("bump_rounds")
                                                                                              or 3), tie_margin=margin)


def options(args: Mapping[str, Any]) -> BumpOptions | None:
    """``pins bump``'s options, checked before any work (``pins lock`` has none of its own)."""
    return bump_options(args) if args.get("pins_command") == "bump" else None


def run(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    return bump(opts, project) if opts.action == "bump" else lock(opts, project)


def lock(opts: Options, project: ProjectRoot) -> int:
    """Resolve abbreviated pins (pins.lock ignored while doing so) and record them in pins.lock."""
    from onebit_build.core import ui
    from onebit_build.spec.pins import apply_lock, load_pins, read_lock
    from onebit_build.job.fetch import run_fetch
    from onebit_build.job.job import Needs, load_pins_and_recipe, open_job

    pins = apply_lock(load_pins(project.pins), {}, locked=False)
    _, recipe = load_pins_and_recipe(project, opts.recipe)
    needs = Needs(git=True, writes_project=True)
    with open_job(opts.settings, project, needs, label=opts.label, loaded=(pins, recipe)) as job:
        wanted = list(opts.args.get("sources") or ()) or [n for n, p in pins.sources.items() if p.abbreviated]
        for n in wanted:
            pins.get(n)
        for n, f in run_fetch(job, wanted).items():
            ui.info(f"  {n}: {f.commit} (from {f.mirror_used})")
        ui.info(f"{pins.lock_path.name}: {len(read_lock(pins.lock_path))} resolved pin(s)")
        return 0


def bump(opts: Options, project: ProjectRoot) -> int:
    """Run the bump's gates; the pins move only when all of them pass."""
    from onebit_build.core import ui
    from onebit_build.core.errors import OnebitError
    from onebit_build.workflows.bump import BumpRequest, BumpTarget, bump as run_bump
    from onebit_build.workflows.bump_report import BumpRecord, move_rows, report_doc
    from onebit_build.job.job import Needs, open_job

    bo = opts.own
    targets = (BumpTarget(source=bo.source, commit=bo.to, sdist=bo.sdist),
               *(BumpTarget(source=n, commit=c) for n, c in bo.coupled))
    needs = Needs(git=True, writes_project=True, compiles=True)
    with open_job(opts.settings, project, needs, label=opts.label) as job:
        for t in targets:
            job.pins.get(t.source)
        record = BumpRecord(recipe=job.recipe.name)
        try:
            run_bump(job, BumpRequest(targets=targets, rounds=bo.rounds, tie_margin=bo.tie_margin), record)
        except OnebitError as exc:
            if opts.json:
                ui.answer_json(report_doc(record))
            same = "byte-identical" if record.pins_after == record.pins_before else "CHANGED"
            exc.message = (f"pins bump refused at gate {record.failed_gate or 'fetch'}: {exc.message}; pins.yaml and "
                           f"pins.lock are {same}; report: {job.run_dir / 'bump-report.md'}")
            raise
        if opts.json:
            ui.answer_json(report_doc(record))
        elif record.nothing_to_move:
            ui.answer("nothing to move: " + ", ".join(f"{r['source']} is at {r['to'][:12]}" for r in move_rows(record)))
        else:
            ui.answer("moved: " + "; ".join(f"{r['source']} {r['from'][:12]} -> {r['to'][:12]}"
                                            for r in move_rows(record)) + f"; wrote {', '.join(record.written)}")
        return 0
