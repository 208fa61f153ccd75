"""``install``: build if needed, then copy llama-server, its libraries and the manifest into a
prefix."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from onebit_build.commands import Command
from onebit_build.job.stage import Stage

if TYPE_CHECKING:
    from pathlib import Path

    from onebit_build.distribution.oci_ref import OciRef
    from onebit_build.core.project import ProjectRoot
    from onebit_build.commands._options import Options

COMMAND = Command(name="install", help="build if needed, then copy llama-server, its libraries and the manifest into"
                  " a prefix", rank=41, until=Stage.BUILD, git=True)


def arguments(p: argparse.ArgumentParser) -> None:
    from onebit_build.commands._oci import UNVERIFIED_HELP, USE_HELP

    p.add_argument("--prefix", metavar="DIR", required=True, help="install into DIR/bin and DIR/share/onebit-build")
    p.add_argument("--from", dest="from_ref", metavar="oci://REGISTRY/REPO[:TAG]",
                   help="install this plan's build published there (checked against its key and the committed"
                        " reference) instead of building; a registry that cannot serve it means a build here")
    p.add_argument("--system-root", metavar="DIR", type=Path,
                   help="check that the system under DIR (the root of a chroot or container the prefix is for) can"
                        " run the build, instead of this box's")
    p.add_argument("--check", action="store_true", help="with --from: also build here and compare every output first")
    p.add_argument("--allow-unverified", action="store_true",
                   help=f"with --from: {UNVERIFIED_HELP}; without: {USE_HELP}")


@dataclass(frozen=True, kw_only=True)
class FromOptions:
    """``--from``, ``--check`` and ``--allow-unverified``, checked."""

    source: OciRef | None = None
    check: bool = False
    allow_unverified: bool = False

    @classmethod
    def of(cls, args: Mapping[str, Any]) -> "FromOptions":
        from onebit_build.distribution.oci_ref import parse_ref
        from onebit_build.core.errors import ConfigError

        given = args.get("from_ref")
        if args.get("check") and not given:
            raise ConfigError("install --check compares a pulled build with a build here: it needs --from",
                              hint="e.g. onebit-build install --from oci://REGISTRY/REPO --check --prefix DIR")
        return cls(source=parse_ref(given, "--from") if given else None, check=bool(args.get("check")),
                   allow_unverified=bool(args.get("allow_unverified")))


def options(args: Mapping[str, Any]) -> Path | None:
    """``--prefix``, its length checked before any work."""
    from onebit_build.commands._options import checked_path

    return checked_path(args.get("prefix"), "--prefix")


def run(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """Build if needed, then copy the relocatable ``bin/`` tree, the manifest and the build's
    provenance statement, SBOM and link into a prefix."""
    from onebit_build.distribution.install import MANIFEST_REL, install_tree
    from onebit_build.core import ui
    from onebit_build.core.errors import ConfigError
    from onebit_build.core.workspace import check_target_folder
    from onebit_build.checking.verdict import VERDICT_NAME, refuse_not_verified
    from onebit_build.evidence.emit import STATEMENT_PATTERNS, carried, clear_stale
    from onebit_build.evidence.floor import check_outputs, write_packages
    from onebit_build.job.job import Needs, open_job
    from onebit_build.job.run import run as run_job

    prefix = opts.own
    if prefix is None:
        raise ConfigError("install needs --prefix DIR", hint="e.g. onebit-build install --prefix ~/.local/llama")
    # Before building: a file or a read-only folder there, or a file where bin/ or share/onebit-build/ goes.
    check_target_folder(prefix, "--prefix", inside=("bin", str(MANIFEST_REL.parent)))
    fo = FromOptions.of(opts.args)
    root = system_root(opts.args.get("system_root"))
    with open_job(opts.settings, project, Needs(git=True), label=opts.label) as job:
        if fo.source is not None:
            from onebit_build.workflows.publish import install_from

            files = install_from(job, fo.source, prefix, check=fo.check, allow_unverified=fo.allow_unverified,
                                 system_root=root)
            ui.answer(f"installed {len(files)} file(s) into {prefix}")
            say_packages(prefix)
            return 0
        built = run_job(job, Stage.BUILD).built
        assert built is not None  # a job run up to the build has built
        recorded = refuse_not_verified(built.manifest, allow=fo.allow_unverified, what="install")
        verdict = [built.manifest.parent / VERDICT_NAME] if recorded is not None else []
        evidence = carried(built.manifest.parent) + verdict  # the verdict travels with the build it judged
        check_outputs([o.path for b in built.builds for o in b.outputs], built.manifest, root=root)
        packages = write_packages(job.run_dir, built.manifest, [o.path for b in built.builds for o in b.outputs])
        evidence += [packages] if packages else []
        files = install_tree(built.builds, built.manifest, prefix, evidence)
        clear_stale(prefix / MANIFEST_REL.parent, keep={f.name for f in evidence},
                    patterns=(*STATEMENT_PATTERNS, VERDICT_NAME))  # an older install's
        ui.answer(f"installed {len(files)} file(s) into {prefix}")
        say_packages(prefix)
        ui.info(f"  run: {prefix / 'bin' / 'llama-server'} -m MODEL.gguf")
        return 0


def system_root(given: Path | None) -> Path | None:
    """``--system-root``: a folder holding a system (its ``etc`` and ``usr``); None for this box."""
    from onebit_build.core.errors import ConfigError

    if given is None:
        return None
    if not given.is_dir() or not (given / "usr").is_dir():
        raise ConfigError(f"--system-root {given}: not the root folder of a system (no usr/ in it)",
                          hint="name the folder a chroot or container's / is, e.g. --system-root /srv/chroot/bookworm")
    return given.resolve()


def say_packages(prefix: Path) -> None:
    """One line naming the system packages the installed server needs, and where the list is."""
    from onebit_build.distribution.install import MANIFEST_REL
    from onebit_build.core import ui
    from onebit_build.evidence.floor import PACKAGES_NAME

    listed = prefix / MANIFEST_REL.parent / PACKAGES_NAME
    if listed.is_file():
        names = [ln.split()[0] for ln in listed.read_text().splitlines() if ln and not ln.startswith("#")]
        ui.info(f"  system packages it needs: {' '.join(names)} (listed in {listed})")
