"""The fetch stage: every source the recipe names, at its pinned commit (a pin's ``before``
checked, pins.lock told of a commit resolved from a prefix), and the configure-time downloads,
so that --offline names a missing one before anything is configured."""

from __future__ import annotations

from pathlib import Path

from onebit_build.core import ui
from onebit_build.core.errors import ConfigError
from onebit_build.core.fsutil import atomic_write_text
from onebit_build.core.gitops import Git
from onebit_build.job.job import Job
from onebit_build.sources.downloads import provide_all
from onebit_build.sources.fetch import FetchRequest, FetchResult, fetch
from onebit_build.spec.pins import Pin, Pins, read_lock, render_lock


def fetch_stage(job: Job) -> tuple[dict[str, FetchResult], dict[str, Path]]:
    """The recipe's sources (by name) and its configure-time downloads (by name)."""
    with ui.stage("fetch") as st:
        fetched = run_fetch(job, job.recipe.sources_in_order())
        st["note"] = ", ".join(f"{n}@{f.commit[:12]} ({f.mirror_used.split(':')[0]})" for n, f in fetched.items())
        downloaded = provide_all(job.recipe, job.workspace, job.settings.mirror_dirs, job.settings.offline)
        if downloaded:
            st["note"] += f"; {len(downloaded)} configure-time download(s): {', '.join(downloaded)}"
    return fetched, downloaded


def run_fetch(job: Job, names: list[str]) -> dict[str, FetchResult]:
    pins, opts = job.pins, job.settings
    out: dict[str, FetchResult] = {}
    for name in names:
        pin = pins.get(name)
        res = fetch(FetchRequest(pin=pin, workspace=job.workspace, mirror_dirs=opts.mirror_dirs, offline=opts.offline,
                                 log=job.log("fetch.log")))
        ui.detail(f"  {name}: {res.commit} from {res.mirror_used}")
        check_before(pin, res, log=job.log("fetch.log"))
        out[name] = res
    newly = {n: r for n, r in out.items() if r.resolved_from}
    if newly and job.project.data_from == "checkout":
        update_lock(pins, newly)
    elif newly:  # the installed package's own files are never written to
        ui.detail(f"  resolved {', '.join(newly)}; {pins.lock_path.name} not updated "
                  "(the pins come from the installed package)")
    return out


def check_before(pin: Pin, res: FetchResult, *, log: Path | None = None) -> bool | None:
    """A pin with ``before: SHA`` must not be that commit nor descend from it. Checked when
    the mirror holds that commit (True: holds); None when it could not be checked."""
    if not pin.before:
        return None
    git = Git(res.bare_repo, log=log, bare=True)
    if not git.has_commit(pin.before):
        ui.detail(f"  {pin.name}: constraint 'before {pin.before[:12]}' not checked (that commit is not in the mirror)")
        return None
    r = git.run("merge-base", "--is-ancestor", pin.before, res.commit, check=False)
    if r.status == 0:
        raise ConfigError(
            f"source {pin.name}: pinned commit {res.commit[:12]} is at or after {pin.before[:12]}, "
            "which it must stay before",
            hint=f"pin a commit older than {pin.before[:12]} in pins.yaml ({pin.note or 'see the note there'})",
        )
    return True


def update_lock(pins: Pins, resolved: dict[str, FetchResult]) -> bool:
    """Record the full SHAs of abbreviated pins in pins.lock. Returns whether it changed."""
    lock = read_lock(pins.lock_path)
    changed = False
    for name, r in resolved.items():
        assert r.resolved_from is not None
        entry = {"prefix": r.resolved_from, "commit": r.commit}
        if lock.get(name) != entry:
            lock[name] = entry
            changed = True
    if changed:
        atomic_write_text(pins.lock_path, render_lock(lock))
        ui.info(f"  recorded resolved commits in {pins.lock_path.name}")
    return changed
