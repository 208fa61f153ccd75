"""The options the commands that use an OCI registry share (build, all, install, publish)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from onebit_build.job.pull import BinaryCacheRequest

BINARY_CACHE_VARIABLE = "ONEBIT_BINARY_CACHE"

UNVERIFIED_HELP = ("take (or publish) a build of a toolchain that has no committed reference, whose bytes cannot be"
                   " checked; the report and the manifest say so")
USE_HELP = ("use a build that 'verify' judged NOT VERIFIED all the same (refused otherwise, exit 11); it is said, and"
            " recorded in what the command writes")


def binary_cache_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--binary-cache", metavar="oci://REGISTRY/REPO",
                   help="take this plan's build from an OCI registry (published with 'publish') instead of compiling,"
                        " when its key and bytes check out; else build here (default: $ONEBIT_BINARY_CACHE)")
    p.add_argument("--allow-unverified", action="store_true", help=UNVERIFIED_HELP)


def binary_cache_given(args: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[str | None, str]:
    """The one reader of ``--binary-cache``: the registry it names (else ``$ONEBIT_BINARY_CACHE``'s,
    else None) and the flag or variable that named it, for messages. Pure."""
    given = args.get("binary_cache")
    if given:
        return str(given), "--binary-cache"
    return environ.get(BINARY_CACHE_VARIABLE) or None, f"${BINARY_CACHE_VARIABLE}"


def cache_options(args: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> BinaryCacheRequest:
    """Where a job's build may be taken from, and whether an unverified one is taken."""
    from onebit_build.distribution.oci_ref import parse_ref
    from onebit_build.job.pull import BinaryCacheRequest

    text, flag = binary_cache_given(args, os.environ if environ is None else environ)
    return BinaryCacheRequest(ref=parse_ref(text, flag) if text else None,
                        allow_unverified=bool(args.get("allow_unverified")))
