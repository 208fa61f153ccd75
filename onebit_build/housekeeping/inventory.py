"""What a workspace holds: its builds (each up to date or stale against today's pins, recipes
and patches), run folders and prepared trees, and what a clean-up may remove.

Decisions are pure functions of manifests and the project's current inputs; finding folders
in use (a held lock, a running server) and removing them are the callers' side effects.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import psutil

from onebit_build.checking.manifest import MANIFEST_NAME, Manifest, load_manifest
from onebit_build.sources.patch import list_patches, patch_digest
from onebit_build.core.fsutil import StateError
from onebit_build.spec.pins import Pins
from onebit_build.core.workspace import Workspace

# Run folders kept by a clean-up: the newest ones (each holds a run's logs and reports).
KEEP_RUNS = 5


@dataclass(frozen=True, kw_only=True)
class Current:
    """Today's inputs of one recipe: its file's sha256 and, per source, the pinned commit and
    the digest of its patch series."""

    recipe_sha256: str | None  # None: the project has no recipe of that name
    sources: Mapping[str, tuple[str, str]]  # name -> (commit, patch digest)


@dataclass(frozen=True, kw_only=True)
class BuildEntry:
    folder: Path  # the build folder holding the manifest (the component that builds llama-server)
    manifest: Manifest
    folders: tuple[Path, ...]  # every component's build folder this build uses
    stale: tuple[str, ...]  # why it is stale; empty: up to date

    @property
    def recipe(self) -> str:
        return self.manifest.recipe

    @property
    def key(self) -> str:
        return self.folder.name.rsplit("-", 1)[-1]

    def built_at(self) -> float | None:
        """When its outputs were last written (a rerun that had nothing to do writes none of
        them, only the manifest): the newest output's modification time, None without any."""
        times = []
        for comp in self.manifest.components:
            for out in comp.outputs:
                try:
                    times.append(Path(out.path).stat().st_mtime)
                except OSError:
                    continue
        return max(times, default=None)


def staleness(man: Manifest, current: Current) -> tuple[str, ...]:
    """Why a build no longer matches today's inputs (empty: up to date). Pure."""
    if current.recipe_sha256 is None:
        return (f"recipe {man.recipe} is not in the project",)
    why = []
    if man.recipe_sha256 != current.recipe_sha256:
        why.append("recipe changed")
    for s in man.sources:
        now = current.sources.get(s.name)
        if now is None:
            why.append(f"source {s.name} is no longer pinned")
        elif s.commit != now[0]:
            why.append(f"pin of {s.name} changed")
        elif s.patch_digest != now[1]:
            why.append(f"patches of {s.name} changed")
    return tuple(why)


def current_inputs(recipe: str, *, recipes_dir: Path, patches_dir: Path, pins: Pins, sources: Iterable[str]) -> Current:
    """Today's inputs of ``recipe`` for the sources a build of it used."""
    path = recipes_dir / f"{recipe}.yaml"
    sha = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    now = {}
    for name in sources:
        if name in pins.sources:
            commit = pins.sources[name].commit
            now[name] = (commit, patch_digest(commit, list_patches(patches_dir, name)))
    return Current(recipe_sha256=sha, sources=now)


def find_builds(ws: Workspace, *, recipes_dir: Path, patches_dir: Path, pins: Pins) -> list[BuildEntry]:
    """Every finished build in the workspace (a build folder with a readable manifest)."""
    out = []
    for manifest_file in sorted(ws.build_dir.glob(f"*/{MANIFEST_NAME}")):
        try:
            man = load_manifest(manifest_file)
        except (StateError, OSError, ValueError):
            continue  # a damaged manifest is no finished build; 'gc' leaves it to 'build'
        folders = tuple(dict.fromkeys([manifest_file.parent,
                                       *(Path(c.build_dir) for c in man.components if c.build_dir)]))
        current = current_inputs(man.recipe, recipes_dir=recipes_dir, patches_dir=patches_dir, pins=pins,
                                 sources=[s.name for s in man.sources])
        out.append(BuildEntry(folder=manifest_file.parent, manifest=man, folders=folders,
                              stale=staleness(man, current)))
    return out


@dataclass(frozen=True, kw_only=True)
class Removal:
    path: Path
    why: str


def plan_removals(builds: list[BuildEntry], *, ws: Workspace, in_use: frozenset[Path]) -> list[Removal]:
    """What a clean-up removes: stale builds (except folders an up-to-date build or a running
    process uses), all but the newest run folders, and prepared trees no kept build was made
    from. Pure, but for listing the workspace's folders."""
    kept = {f for b in builds if not b.stale for f in b.folders} | set(in_use)
    out: list[Removal] = []
    for b in builds:
        if b.stale:
            for f in b.folders:
                if f not in kept and f.exists() and f.is_relative_to(ws.build_dir):
                    out.append(Removal(path=f, why=f"{b.recipe} build, stale: {', '.join(b.stale)}"))
                    kept.add(f)  # listed once even when two stale builds share it
    runs = sorted((p for p in ws.runs.iterdir() if p.is_dir()), key=lambda p: p.name) if ws.runs.is_dir() else []
    out += [Removal(path=p, why="old run folder") for p in runs[:-KEEP_RUNS] if p not in in_use]
    trees = {Path(s.tree) for b in builds if not b.stale for s in b.manifest.sources if s.tree}
    for tree in sorted(ws.src_dir.iterdir()) if ws.src_dir.is_dir() else []:
        if tree.is_dir() and tree not in trees and tree not in in_use and not tree.name.startswith("."):
            out.append(Removal(path=tree, why="prepared tree no up-to-date build was made from"))
    return out


def folder_size(path: Path) -> int:
    """Bytes of the files under ``path`` (links not followed, ``path`` itself included)."""
    if path.is_symlink():
        return 0  # a link: removing it frees no more than its name
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def processes_using(folders: Iterable[Path]) -> frozenset[Path]:
    """The folders among ``folders`` that a running process's program lives in (a llama-server
    started by 'serve' holds no workspace lock)."""
    folders = [f.resolve() for f in folders]
    used = set()
    for p in psutil.process_iter(["exe"]):  # a process of another user reads as exe None
        if p.info["exe"]:
            exe = Path(os.path.realpath(p.info["exe"]))
            used |= {f for f in folders if exe.is_relative_to(f)}
    return frozenset(used)
