"""``pins bump``: move a pin (or a coupled pair) to a new commit, only when the new build
passes every gate, in order:

1. fetch: the new commit (from the sdist of ``--to-sdist``, sha256 as the index lists it),
   and the old one beside it; a pin's ``before`` guard holds;
2. patches: every local patch re-applied to the new commit three-way (sources.reapply);
3. build: the recipe at the new pins with the re-applied series, from a staged copy of the
   project's files in the run folder (the project's own files are not touched);
4. verify: the build is reproducible: built again without the compiler cache from sources at
   another path, every output, object and kernel artifact the same; it becomes the reference
   of this toolchain (the committed one names the old pin);
5. smoke: the smoke test of the new build;
6. bench: the old pin's build against the new one, interleaved, answers checked;
7. write: pins.yaml, pins.lock, the changed patches and the reference, all of them or none.

On any failure the project's files are untouched and the report names the gate that failed.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import datetime, timedelta, timezone
from dataclasses import dataclass, replace
from pathlib import Path

from onebit_build.checking.manifest import latest_path, load_manifest
from onebit_build.sources.patch import list_patches
from onebit_build.sources.reapply import Reapplied, ReapplyRequest, reapply
from onebit_build.checking.references import recipe_folder, recipe_folder_files, reference_file, write_reference
from onebit_build.core import ui
from onebit_build.core.errors import ConfigError, OnebitError, PatchError, SmokeError
from onebit_build.core.fsutil import atomic_write_bytes, replace_files, sha256_file
from onebit_build.core.gitops import Git
from onebit_build.spec.pins import Pins, load_pins, read_lock, render_lock
from onebit_build.spec.pins_edit import PinMove, check_moved, moved_text
from onebit_build.core.project import CHECKOUT, ProjectRoot
from onebit_build.job.build import Built, server_of
from onebit_build.job.fetch import run_fetch
from onebit_build.job.run import build_part, smoke_part
from onebit_build.workflows.bump_report import BumpRecord, gate, patch_table, write_report
from onebit_build.job.job import Job, load_pins_and_recipe
from onebit_build.job.plan import plan_of

STAGED_PROJECT = "project"  # the staged copy of the project's files, in the run folder
# The bench excuses a greedy flip of the new build where the old build's two likeliest tokens
# were within this many nats: two commits may sum in another order (one was seen at 0.123
# between llama-cpp-python 0.3.35's and 0.3.36's commits on the CPU; bench's own default,
# 0.1, is for one build on two devices).
TIE_MARGIN = 0.25


@dataclass(frozen=True, kw_only=True)
class BumpTarget:
    """Where the user asks one source to go."""

    source: str
    commit: str | None = None  # --to / --with
    sdist: tuple[str, str] | None = None  # --to-sdist: (package, version)


@dataclass(frozen=True, kw_only=True)
class BumpRequest:
    targets: tuple[BumpTarget, ...]  # SOURCE first, then the --with ones
    rounds: int = 3  # bench rounds
    tie_margin: float = TIE_MARGIN  # nats: a greedy flip the bench excuses between the two commits


def bump(job: Job, req: BumpRequest, record: BumpRecord) -> None:
    """Run the gates, keeping what happened in ``record`` (its report written in the run
    folder). Raises the failing gate's error after the report is written; the pins are then
    untouched."""
    record.pins_before = pin_files(job.project)
    latest = latest_path(job.workspace, job.recipe.name)
    kept = latest.read_bytes() if latest.is_file() else None
    try:
        _gates(job, req, record)
    except (OnebitError, KeyboardInterrupt):
        if kept is not None:  # the workspace's latest build of the recipe stays the pinned one
            atomic_write_bytes(latest, kept)
        raise
    finally:
        record.pins_after = pin_files(job.project)
        js, md = write_report(job.run_dir, record)
        ui.info(f"report: {md} ({js.name} beside it)")


def pin_files(project: ProjectRoot) -> dict[str, str]:
    """The sha256 of pins.yaml and pins.lock (absent ones left out)."""
    return {p.name: sha256_file(p) for p in (project.pins, project.pins.with_name("pins.lock")) if p.is_file()}


def _gates(job: Job, req: BumpRequest, record: BumpRecord) -> None:
    with gate(record, "fetch") as g:
        record.old = {t.source: job.pins.get(t.source) for t in req.targets}
        record.moves = fetch_moves(job, req.targets)
        g.note = "; ".join(f"{m.name} {record.old[m.name].commit[:12]} -> {m.commit[:12]}" for m in record.moves)
    if all(m.commit == record.old[m.name].commit and m.sdist in (None, *record.old[m.name].mirrors)
           for m in record.moves):
        record.nothing_to_move = True
        return
    with gate(record, "patches") as g:
        record.reapplied = [reapply_series(job, m, record.old[m.name].commit) for m in record.moves]
        for line in patch_table(record):
            ui.info(line)
        bad = [o for r in record.reapplied for o in r.outcomes if not o.ok]
        if bad:
            raise PatchError(f"{len(bad)} patch(es) conflict with the new commit: " + "; ".join(
                f"{o.patch} ({', '.join(o.detail[:2])})" for o in bad),
                hint="regenerate each named patch on the new commit (patches export), then bump again")
        g.note = f"{sum(len(r.outcomes) for r in record.reapplied)} patch(es) re-applied"
    new_job, built = _build_verify_smoke(job, record)
    _bench(job, new_job, built, req, record)
    with gate(record, "write") as g:
        record.written = write_all(job, new_job, record, built)
        atomic_write_bytes(latest_path(job.workspace, job.recipe.name), built.manifest.read_bytes())
        g.note = f"{len(record.written)} file(s)"


# --------------------------------------------------------------------------- fetch


def fetch_moves(job: Job, targets: tuple[BumpTarget, ...]) -> tuple[PinMove, ...]:
    """Each target's move, its new commit fetched into the workspace's store beside the old one."""
    from onebit_build.sources.sdist_target import sdist_target

    moves = []
    for t in targets:
        pin = job.pins.get(t.source)
        sdist = None
        if t.sdist is not None:
            found = sdist_target(pin, *t.sdist, ws=job.workspace, log=job.log("fetch.log"))
            if t.commit is not None and t.commit != found.commit:
                raise ConfigError(f"{found.mirror.label} carries {found.commit[:12]}, not --to {t.commit[:12]}",
                                  hint="drop --to, or name the sdist that carries that commit")
            commit, sdist = found.commit, found.mirror
        elif pin.mirrors:
            raise ConfigError(f"source {t.source} comes from an sdist mirror ({pin.mirrors[0].label}) that does not "
                              "carry another commit",
                              hint=f"move it with --to-sdist {pin.mirrors[0].package}==VERSION")
        else:
            assert t.commit is not None
            commit = t.commit
        moves.append(PinMove(name=t.source, commit=commit, sdist=sdist))
    moved = moved_pins(job.pins, tuple(moves))
    names = [m.name for m in moves]
    fetched_new = run_fetch(replace(job, pins=moved), names)
    fetched_old = run_fetch(job, names)
    return tuple(replace(m, build_number=next_build_number(job.pins.get(m.name).build_number,
                                                           fetched_old[m.name].commit, m.commit,
                                                           fetched_new[m.name].bare_repo)) for m in moves)


def moved_pins(pins: Pins, moves: tuple[PinMove, ...]) -> Pins:
    by_name = {m.name: m for m in moves}
    return replace(pins, sources={n: by_name[n].applied_to(p) if n in by_name else p for n, p in pins.sources.items()})


def next_build_number(current: str | None, old: str, new: str, bare: Path) -> str | None:
    """A build number that is the old commit's date (YYYYMMDD, as pins.yaml labels it) becomes
    the new commit's; any other is left as it is (None)."""
    if current is None:
        return None
    git = Git(bare, bare=True)
    days = [commit_day(git.out("cat-file", "commit", c)) for c in (old, new)]
    return days[1] if current == days[0] else None


def commit_day(raw: str) -> str:
    """The committer date of a raw commit object as YYYYMMDD, in the committer's own time zone. Pure."""
    m = re.search(r"^committer .* (\d+) ([+-])(\d\d)(\d\d)$", raw, re.M)
    if not m:
        raise ConfigError("a commit without a committer line", hint="the git store is damaged: remove it")
    offset = (1 if m.group(2) == "+" else -1) * timedelta(hours=int(m.group(3)), minutes=int(m.group(4)))
    return datetime.fromtimestamp(int(m.group(1)), timezone(offset)).strftime("%Y%m%d")


# --------------------------------------------------------------------------- patches and the staged project


def reapply_series(job: Job, move: PinMove, old: str) -> Reapplied:
    bare = job.workspace.bare_repo(move.name)
    return reapply(ReapplyRequest(source=move.name, bare_repo=bare, old=old, new=move.commit,
                                  patches=list_patches(job.project.patches, move.name),
                                  work=job.run_dir / "reapply" / move.name, log=job.log("patch.log")))


def staged_job(job: Job, record: BumpRecord) -> Job:
    """The job at the new pins: a copy of the project's files in the run folder with pins.yaml
    and pins.lock moved and the re-applied series in patches/."""
    project = job.project
    root = job.run_dir / STAGED_PROJECT
    for folder in ("recipes", "patches", "references", "smoke"):
        if (project.path / folder).is_dir():
            shutil.copytree(project.path / folder, root / folder, symlinks=True)
    if project.models_lock.is_file():
        shutil.copy2(project.models_lock, root / project.models_lock.name)
    before = load_pins(project.pins)
    text = project.pins.read_text(encoding="utf-8")
    for m in record.moves:
        text = moved_text(text, m, had_abbreviated=before.sources[m.name].abbreviated)
    (root / "pins.yaml").write_text(text, encoding="utf-8")
    lock = {k: v for k, v in read_lock(before.lock_path).items() if k not in {m.name for m in record.moves}}
    (root / "pins.lock").write_text(render_lock(lock), encoding="utf-8")
    for r in record.reapplied:
        for name, data in r.changed.items():
            target = root / "patches" / r.source / name
            target.unlink() if data is None else target.write_bytes(data)
    staged = ProjectRoot(path=root, data_from=CHECKOUT, found_by="pins bump")
    check_moved(before, load_pins(staged.pins), record.moves)
    pins, recipe = load_pins_and_recipe(staged, job.settings.recipe, defines=job.settings.defines)
    (job.run_dir / "new").mkdir(exist_ok=True)
    return replace(job, project=staged, pins=pins, recipe=recipe, run_dir=job.run_dir / "new",
                   plan=plan_of(job.settings, staged, pins, recipe, job.workspace))


# --------------------------------------------------------------------------- build, verify, smoke, bench


def _build_verify_smoke(job: Job, record: BumpRecord) -> tuple[Job, Built]:
    from onebit_build.workflows.verify import rebuild_and_compare

    with gate(record, "build") as g:
        new_job = staged_job(job, record)
        built = build_part(new_job)
        assert built is not None
        g.note = f"{server_of(built.builds, new_job.recipe)}"
    with gate(record, "verify") as g:
        rebuild_and_compare(new_job, built)
        manifest = load_manifest(built.manifest)
        ref = reference_file(new_job.references, manifest)
        write_reference(ref, manifest)
        g.note = f"reproducible without the compiler cache; reference {ref.name}"
    with gate(record, "smoke") as g:
        code = smoke_part(new_job, built, verified={"status": "reproducible", "reference": ref.name})
        record.links["smoke report"] = "new/report.md"
        if code != 0:
            raise SmokeError("the new build failed its smoke test", hint=f"see {new_job.run_dir / 'report.md'}")
        g.note = "all checks passed"
    return new_job, built


def _bench(job: Job, new_job: Job, built: Built, req: BumpRequest, record: BumpRecord) -> None:
    from onebit_build.workflows.bump_bench import bench_old_new

    with gate(record, "bench") as g:
        (job.run_dir / "old").mkdir(exist_ok=True)
        old = build_part(replace(job, run_dir=job.run_dir / "old"))
        assert old is not None
        record.bench_table, bad = bench_old_new(
            new_job, old=server_of(old.builds, job.recipe), new=server_of(built.builds, new_job.recipe),
            rounds=req.rounds, out=job.run_dir / "bench", tie_margin=req.tie_margin)
        record.links["bench"] = "bench/bench.md"
        if bad:
            raise SmokeError(f"bench: {len(bad)} figure(s) invalid, their answers did not hold; first: {bad[0]}",
                             hint=f"see {job.run_dir / 'bench' / 'bench.md'}: the new build answers otherwise than the"
                                  " old one")
        g.note = "every answer held; old against new in bench/bench.md"


# --------------------------------------------------------------------------- write


def write_all(job: Job, new_job: Job, record: BumpRecord, built: Built) -> list[str]:
    """The moved pins, the changed patches and the new reference into the project, all or
    none; refused when pins.yaml or pins.lock changed while the bump ran."""
    project, staged = job.project, new_job.project
    if pin_files(project) != record.pins_before:
        raise ConfigError("pins.yaml or pins.lock changed while the bump ran; nothing was written",
                          hint="run the bump again on the files as they are now")
    changes: dict[Path, bytes | None] = {project.pins: staged.pins.read_bytes()}
    lock = project.pins.with_name("pins.lock")
    new_lock = staged.pins.with_name("pins.lock").read_bytes()
    if not lock.is_file() or lock.read_bytes() != new_lock:
        changes[lock] = new_lock
    for r in record.reapplied:
        for name, data in r.changed.items():
            changes[project.patches / r.source / name] = data
    manifest = load_manifest(built.manifest)
    staged_ref = reference_file(recipe_folder(staged.references, job.recipe.name), manifest)
    changes[reference_file(recipe_folder(project.references, job.recipe.name), manifest)] = staged_ref.read_bytes()
    replace_files(changes)
    record.stale_references = stale_references(project, record)
    return [str(p.relative_to(project.path)) for p in changes]


def stale_references(project: ProjectRoot, record: BumpRecord) -> list[str]:
    """Committed references (of any recipe) that still name a moved source's old commit."""
    old = {m.name: record.old[m.name].commit for m in record.moves}
    out = []
    for path in recipe_folder_files(project.references):
        try:
            sources = json.loads(path.read_text(encoding="utf-8")).get("sources") or []
        except (OSError, ValueError, AttributeError):
            continue
        if any(isinstance(s, dict) and s.get("name") in old and s.get("commit") == old[s["name"]] for s in sources):
            out.append(str(path.relative_to(project.path)))
    return out
