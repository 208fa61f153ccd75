"""The options the commands that use an OCI registry share (build, all, install, publish)."""

from __future__ import annotations

import argparse

UNVERIFIED_HELP = ("take (or publish) a build of a toolchain that has no committed reference, whose bytes cannot be"
                   " checked; the report and the manifest say so")
USE_HELP = ("use a build that 'verify' judged NOT VERIFIED all the same (refused otherwise, exit 11); it is said, and"
            " recorded in what the command writes")


def binary_cache_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--binary-cache", metavar="oci://REGISTRY/REPO",
                   help="take this plan's build from an OCI registry (published with 'publish') instead of compiling,"
                        " when its key and bytes check out; else build here (default: $ONEBIT_BINARY_CACHE)")
    p.add_argument("--allow-unverified", action="store_true", help=UNVERIFIED_HELP)
