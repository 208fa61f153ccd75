"""``publish oci://REGISTRY/REPO[:TAG]``: build and verify if needed, then push the build (its
install tree, manifest, provenance and SBOM files) as one OCI artifact tagged by recipe and key."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from onebit_build.commands import Command
from onebit_build.job.stage import Stage

if TYPE_CHECKING:
    from onebit_build.distribution.oci_ref import OciRef

COMMAND = Command(name="publish", help="push a finished, verified build to an OCI registry, tagged by recipe and build"
                  " key (a binary cache for build --binary-cache and install --from)", rank=42, until=Stage.VERIFY,
                  git=True)


def arguments(p: argparse.ArgumentParser) -> None:
    from onebit_build.commands._oci import UNVERIFIED_HELP

    p.add_argument("target", metavar="oci://REGISTRY/REPO[:TAG]",
                   help="the repository to push to; TAG is an extra tag beside <recipe>-<build key>")
    p.add_argument("--allow-unverified", action="store_true", help=UNVERIFIED_HELP)


@dataclass(frozen=True, kw_only=True)
class PublishOptions:
    target: OciRef
    allow_unverified: bool = False

    @classmethod
    def of(cls, args: Mapping[str, Any]) -> "PublishOptions":
        from onebit_build.distribution.oci_ref import parse_ref
        from onebit_build.core.errors import ConfigError

        target = parse_ref(str(args.get("target") or ""), "publish")
        if target.digest:
            raise ConfigError(f"publish {target}: a digest names what is already there",
                              hint="give oci://REGISTRY/REPO or oci://REGISTRY/REPO:TAG")
        return cls(target=target, allow_unverified=bool(args.get("allow_unverified")))


def run(opts, project, cmd: Command) -> int:
    from onebit_build.job.job import Needs, open_job
    from onebit_build.workflows.publish import publish

    po = PublishOptions.of(opts.args)
    with open_job(opts.settings, project, Needs(git=True), label=opts.label) as job:
        publish(job, po.target, allow_unverified=po.allow_unverified)
        return 0
