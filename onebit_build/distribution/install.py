"""``install --prefix``: a build's outputs and manifest, put into a prefix whole or not at all.

Everything is first copied into a staging folder inside the prefix (same file system, so a
rename moves a file without writing its bytes again). Only when the staging folder holds the
whole install are the files switched in, each by one rename, with the replaced ones kept
aside; a failed switch puts them back. Ctrl-C while staging leaves the old install as it
was; Ctrl-C during the switch (renames only) is held until the switch is done. A full disk
can only strike while staging, and then names the prefix.
"""

from __future__ import annotations

import errno
import filecmp
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from onebit_build.building.elfdeps import build_tree_libraries, outside_loads
from onebit_build.core import ui
from onebit_build.core.errors import BuildError, ConfigError, OnebitError, SpaceError, is_disk_full
from onebit_build.core.proc import interrupts_held
from onebit_build.core.workspace import pid_alive

STAGING_PREFIX = ".onebit-build-install.tmp-"
_STAGING_RE = re.compile(rf"^{re.escape(STAGING_PREFIX)}(\d+)$")
MANIFEST_REL = Path("share") / "onebit-build" / "build-manifest.json"


@dataclass(frozen=True, kw_only=True)
class Item:
    """One file of an install: where it comes from and where it goes, relative to the prefix."""

    source: Path
    rel: Path
    link: bool = False  # copied as the symbolic link it is


def install_items(builds: Sequence, manifest: Path, evidence: Sequence[Path] = ()) -> list[Item]:
    """Every output file of the builds (with the links beside a library that name it) into
    ``bin/``, and the manifest with the build's ``evidence`` (its provenance statement, SBOM
    and link) into ``share/onebit-build/``. Two files for one name are an error: the install
    would depend on their order."""
    items: dict[Path, Item] = {}
    # A folder output (an assembled prefix) is carried by its files, listed as outputs of their own.
    files = sorted({p for b in builds for o in b.outputs if not o.path.is_dir() for p in _output_files(o.path)})
    for src in files:
        rel = Path("bin") / src.name
        if rel in items:
            if _same(items[rel].source, src):
                continue  # one library reached twice (from its build folder and from the assembled prefix)
            raise ConfigError(f"two outputs would both be installed as {rel} ({items[rel].source} and {src})",
                              hint="give the recipe's outputs distinct file names")
        items[rel] = Item(source=src, rel=rel, link=src.is_symlink())
    # Every library those files load from a build folder goes beside them (found from DT_NEEDED).
    elves = [f for f in files if not f.is_symlink()]
    for root in _build_dirs(builds):
        for name, lib in sorted(build_tree_libraries(elves, root).items()):
            items.setdefault(Path("bin") / name, Item(source=lib, rel=Path("bin") / name))
    items[MANIFEST_REL] = Item(source=manifest, rel=MANIFEST_REL)
    for f in evidence:
        items[MANIFEST_REL.parent / f.name] = Item(source=f, rel=MANIFEST_REL.parent / f.name)
    return list(items.values())


def _same(a: Path, b: Path) -> bool:
    """Whether two outputs would install the same thing: links with one target, or equal bytes."""
    if a.is_symlink() or b.is_symlink():
        return a.is_symlink() and b.is_symlink() and a.readlink() == b.readlink()
    return filecmp.cmp(a, b, shallow=False)


def _build_dirs(builds: Sequence) -> list[Path]:
    return [b.build_dir for b in builds]


def check_self_contained(tree: Path, builds: Sequence) -> None:
    """Refuse a staged tree that would still load a library from a build folder (it would
    break once the build folders go)."""
    problems = [p for root in _build_dirs(builds) for p in outside_loads(tree, root)]
    if problems:
        raise BuildError(f"the install would still load from a build folder: {'; '.join(problems[:4])}",
                         hint="give the component CMAKE_BUILD_RPATH=$ORIGIN so that its binaries find their "
                              "libraries beside them")


def _output_files(path: Path) -> list[Path]:
    """An output and, for a shared library, the links beside it that name it."""
    if not path.exists():
        raise OnebitError(f"build output {path} is missing", hint="run 'onebit-build build' again")
    return [path, *(p for p in path.parent.iterdir() if p.is_symlink() and p.resolve() == path.resolve())]


def install_tree(builds: Sequence, manifest: Path, prefix: Path, evidence: Sequence[Path] = ()) -> list[Path]:
    """Install the builds' outputs, ``manifest`` and ``evidence`` into ``prefix`` (see the module
    text); returns the installed paths. The prefix holds either the old install or the new one."""
    return install_items_into(install_items(builds, manifest, evidence), prefix, builds)


def install_items_into(items: Sequence[Item], prefix: Path, builds: Sequence = ()) -> list[Path]:
    """Stage ``items`` inside ``prefix``, check that nothing loads from the ``builds``' folders,
    then switch them in (see the module text)."""
    existed = prefix.exists()
    prefix.mkdir(parents=True, exist_ok=True)
    _sweep(prefix)
    staging = prefix / f"{STAGING_PREFIX}{os.getpid()}"
    switched = False
    try:
        _stage(items, staging, prefix)
        check_self_contained(staging / "new" / "bin", builds)
        interrupted = _switch(items, staging, prefix)
        switched = True
    except KeyboardInterrupt:
        ui.warn(f"install interrupted before the switch: {prefix} is unchanged")
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if not switched and not existed:
            _remove_empty(prefix)
    if interrupted:
        ui.warn(f"interrupted during the switch, after it was complete: {prefix} holds the new install")
        raise KeyboardInterrupt
    return [prefix / it.rel for it in items]


def _remove_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def _sweep(prefix: Path) -> None:
    """Remove the staging folders of installs that were killed (their pid is gone)."""
    for p in prefix.iterdir():
        m = _STAGING_RE.match(p.name)
        if m and not pid_alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True)
            ui.info(f"  removed {p.name}, left behind by an install that was killed")


def _stage(items: Sequence[Item], staging: Path, prefix: Path) -> None:
    try:
        for it in items:
            dest = staging / "new" / it.rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if it.link:
                dest.symlink_to(it.source.readlink())
            else:
                shutil.copy2(it.source, dest)
    except OSError as exc:
        if is_disk_full(exc):
            need = sum(it.source.stat().st_size for it in items if not it.link)
            raise SpaceError(f"no space left on device at {prefix} while installing "
                             f"(needs about {need / 1e6:.0f} MB there)",
                             hint=f"free some space there or choose another --prefix; {prefix} is unchanged") from None
        raise


def _switch(items: Sequence[Item], staging: Path, prefix: Path) -> bool:
    """Rename each staged file into place, the file it replaces moved aside first; on an
    error every replaced file is put back, so the prefix holds the old install again.
    Returns whether Ctrl-C (or SIGTERM) came meanwhile: it is held until the end."""
    done: list[tuple[Path, Path | None]] = []  # (target, where the old one was put)
    with interrupts_held() as held:
        try:
            for it in items:
                target = prefix / it.rel
                target.parent.mkdir(parents=True, exist_ok=True)
                old = None
                if target.exists() or target.is_symlink():
                    old = staging / "old" / it.rel
                    old.parent.mkdir(parents=True, exist_ok=True)
                    _move(target, old)
                done.append((target, old))
                _move(staging / "new" / it.rel, target)
        except OSError:
            _put_back(done)
            raise
    return bool(held)


def _put_back(done: list[tuple[Path, Path | None]]) -> None:
    for target, old in reversed(done):
        if target.is_symlink() or target.is_file():
            target.unlink()
        if old is not None:
            _move(old, target)


def _move(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst``; across a file-system boundary (the prefix's ``bin`` a link to
    another disk: EXDEV), copy it to a temporary name beside ``dst`` and rename that, so that
    ``dst`` is still replaced whole."""
    try:
        os.replace(src, dst)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    tmp = dst.with_name(f"{STAGING_PREFIX}{os.getpid()}-{dst.name}")
    try:
        shutil.copy2(src, tmp, follow_symlinks=False)
        os.replace(tmp, dst)
    finally:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
    src.unlink()
