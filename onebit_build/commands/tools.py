"""Commands that write into the project's own files: ``pins lock`` and ``patches export``."""

from __future__ import annotations

from onebit_build.building.patch import PreparedTree, canonical_path, export_series, list_patches, patch_digest
from onebit_build.commands import Command
from onebit_build.core import ui
from onebit_build.core.errors import OnebitError
from onebit_build.core.gitops import Git
from onebit_build.core.pins import apply_lock, load_pins, read_lock
from onebit_build.core.project import ProjectRoot
from onebit_build.job.build import run_fetch
from onebit_build.job.model import Job, Needs, load_pins_and_recipe, open_job
from onebit_build.options import Options


def pins_lock(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """Resolve abbreviated pins (pins.lock ignored while doing so) and record them in pins.lock."""
    pins = apply_lock(load_pins(project.pins), {}, locked=False)
    _, recipe = load_pins_and_recipe(project, opts.recipe)
    with open_job(opts, project, Needs(git=True, writes_project=True), loaded=(pins, recipe)) as job:
        wanted = list(opts.sources) or [n for n, p in pins.sources.items() if p.abbreviated]
        for n in wanted:
            pins.get(n)
        for n, f in run_fetch(job, wanted).items():
            ui.info(f"  {n}: {f.commit} (from {f.mirror_used})")
        ui.info(f"{pins.lock_path.name}: {len(read_lock(pins.lock_path))} resolved pin(s)")
        return 0


def patches_export(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """Write the commits of a prepared tree back as ``patches/SOURCE/NNNN-*.patch``."""
    (source,) = opts.sources
    with open_job(opts, project, Needs(git=True, writes_project=True)) as job:
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
    patches = list_patches(job.project.patches, source)
    digest = patch_digest(commit, patches)
    path = canonical_path(job.workspace, source, commit, digest)
    if not path.exists():
        raise OnebitError(f"no prepared tree for {source} at {path}",
                          hint="run 'onebit-build patch' first, commit your changes in that tree, then export")
    head = Git(path).out("rev-parse", "HEAD")
    return PreparedTree(source=source, path=path, commit=commit, head=head, patches=patches, patch_digest=digest,
                        reused=True)
