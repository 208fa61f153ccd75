"""``patches export``: write a prepared tree's commits back as ``patches/SOURCE/NNNN-*.patch``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from onebit_build.commands import Command

if TYPE_CHECKING:
    from onebit_build.sources.patch import PreparedTree
    from onebit_build.core.project import ProjectRoot
    from onebit_build.job.job import Job
    from onebit_build.commands._options import Options

COMMAND = Command(name="patches", help="patch series tools", rank=61, git=True, writes_project=True, action="export")


def arguments(p: argparse.ArgumentParser) -> None:
    from onebit_build.commands.arguments import global_options

    sub = p.add_subparsers(dest="patches_command", metavar="ACTION", required=True)
    ex = sub.add_parser("export", help="write a prepared tree's commits back as patches/<source>/NNNN-*.patch")
    global_options(ex, listed=False)
    ex.add_argument("source")


def run(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """Write the commits of a prepared tree back as ``patches/SOURCE/NNNN-*.patch``."""
    from onebit_build.sources.patch import export_series
    from onebit_build.core import ui
    from onebit_build.job.fetch import run_fetch
    from onebit_build.job.job import Needs, open_job

    source = str(opts.args["source"])
    with open_job(opts.settings, project, Needs(git=True, writes_project=True), label=opts.label) as job:
        job.pins.get(source)
        fetched = run_fetch(job, [source])
        tree = tree_as_it_is(job, source, fetched[source].commit)
        written = export_series(tree, project.patches / source, log=job.log("patch.log"))
        for p in written:
            ui.info(f"  {p}")
        ui.info(f"wrote {len(written)} patch(es) to {project.patches / source}")
        return 0


def tree_as_it_is(job: Job, source: str, commit: str) -> PreparedTree:
    """The prepared tree of ``source`` as it is now (the user may have committed changes in
    it), found by its pin and the current patch series."""
    from onebit_build.sources.patch import PreparedTree, canonical_path, list_patches, patch_digest
    from onebit_build.core.errors import OnebitError
    from onebit_build.core.gitops import Git

    patches = list_patches(job.project.patches, source)
    digest = patch_digest(commit, patches)
    path = canonical_path(job.workspace, source, commit, digest)
    if not path.exists():
        raise OnebitError(f"no prepared tree for {source} at {path}",
                          hint="run 'onebit-build patch' first, commit your changes in that tree, then export")
    head = Git(path).out("rev-parse", "HEAD")
    return PreparedTree(source=source, path=path, commit=commit, head=head, patches=patches, patch_digest=digest,
                        reused=True)
