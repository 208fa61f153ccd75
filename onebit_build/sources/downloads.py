"""Configure-time downloads: fetched by the tool, sha256-checked, unpacked, handed to CMake.

Upstream CMake code that calls ``FetchContent_Declare(NAME URL ... URL_HASH SHA256=...)``
and then populates it reaches the network while configuring, which ``--offline`` and a
mirror folder cannot serve. For every download a recipe declares, the tool fetches the
archive itself (from the workspace cache, a ``--mirror-dir`` holding a file of the URL's
name, or the URL), checks the pinned sha256, unpacks it the way FetchContent does (a single
top-level folder is stripped) and passes ``FETCHCONTENT_SOURCE_DIR_<NAME>`` with
``FETCHCONTENT_FULLY_DISCONNECTED=ON``, so configure never downloads anything.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from onebit_build.core import ui
from onebit_build.spec.recipe import Component, Recipe
from onebit_build.spec.downloads_spec import DownloadSpec
from onebit_build.core.errors import ConfigError, FetchError, IntegrityError
from onebit_build.core.fsutil import sha256_file
from onebit_build.core.workspace import Workspace

DISCONNECTED = ("FETCHCONTENT_FULLY_DISCONNECTED", "ON")


def cache_dir(ws: Workspace, spec: DownloadSpec) -> Path:
    """Keyed by the pinned sha256: a new pin never reuses another archive's tree."""
    return ws.downloads / "configure" / f"{spec.name}-{spec.sha256[:16]}"


def unpacked_tree(ws: Workspace, spec: DownloadSpec) -> Path | None:
    """The unpacked tree of a download already verified in the workspace, or None."""
    base = cache_dir(ws, spec)
    marker = base / "unpacked.sha256"
    if not (marker.is_file() and marker.read_text().strip() == spec.sha256):
        return None
    tops = [p for p in (base / "tree").iterdir()] if (base / "tree").is_dir() else []
    return tops[0] if len(tops) == 1 and tops[0].is_dir() else (base / "tree")


def places(spec: DownloadSpec, ws: Workspace, mirror_dirs: tuple[Path, ...], offline: bool) -> list[str]:
    """Where a download is looked for, in order (for the plan)."""
    out = [f"cache {cache_dir(ws, spec)}"]
    out += [f"mirror {d / spec.file_name}" for d in mirror_dirs]
    out.append("network: not with --offline" if offline else f"network {spec.public}")
    return out


def _verified_copy(src: Path, dest: Path, want: str) -> bool:
    """Copy ``src`` to ``dest`` when its sha256 is ``want``; refuse (IntegrityError) otherwise."""
    got = sha256_file(src)
    if got != want:
        raise IntegrityError(
            f"{src}: sha256 {got}, not the pinned {want}",
            hint="that file is not the archive the pinned CMake code asks for: replace it or remove it",
        )
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.copyfile(src, tmp)
    tmp.replace(dest)
    return True


def _download(spec: DownloadSpec, dest: Path) -> None:
    """Fetch ``spec`` from its URL through the one downloader of the project (retries with
    backoff, a cut transfer resumed, the sha256 checked before the file gets its name, a bar
    on a terminal); a failed transfer names the mirror folder as the way round."""
    # pkgindex (requests, urllib3) is imported here: only a run that really downloads pays for it.
    from onebit_build.sources import pkgindex

    cand = pkgindex.Candidate(filename=spec.file_name, url=spec.url, sha256=spec.sha256)
    try:
        pkgindex.download(cand, dest, want_sha256=spec.sha256, cfg=pkgindex.load_index_config(),
                          label=f"download {spec.name}")
    except IntegrityError:
        raise
    except FetchError as exc:
        raise FetchError(exc.message, hint=f"check the network, or put {spec.file_name} in a --mirror-dir") from None


def _archive(spec: DownloadSpec, ws: Workspace, mirror_dirs: tuple[Path, ...], offline: bool) -> Path | None:
    """The verified archive in the cache, fetched from the first place that has it; None when
    offline and no cache or mirror holds it."""
    base = cache_dir(ws, spec)
    base.mkdir(parents=True, exist_ok=True)
    dest = base / spec.file_name
    if dest.is_file():
        if sha256_file(dest) == spec.sha256:
            return dest
        ui.warn(f"{dest}: cached archive is damaged (sha256 differs); fetching it again")
        dest.unlink()
    for d in mirror_dirs:
        cand = d / spec.file_name
        if cand.is_file() and _verified_copy(cand, dest, spec.sha256):
            ui.detail(f"  download {spec.name}: from {cand}")
            return dest
    if offline:
        return None
    ui.info(f"  downloading {spec.file_name} ({spec.name}; sha256 {spec.sha256[:16]})")
    _download(spec, dest)
    return dest


def provide(spec: DownloadSpec, ws: Workspace, mirror_dirs: tuple[Path, ...], offline: bool) -> Path | None:
    """The unpacked source tree of one download (fetched and unpacked once); None when
    offline and it is nowhere at hand."""
    # The archive extractor of the fetch stage checks every member; imported here to keep
    # this module's import light for the plan.
    from onebit_build.sources.fetch import safe_extract

    tree = unpacked_tree(ws, spec)
    if tree is not None:
        return tree
    archive = _archive(spec, ws, mirror_dirs, offline)
    if archive is None:
        return None
    base = cache_dir(ws, spec)
    tmp = base / "tree.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        safe_extract(archive, tmp)
        shutil.rmtree(base / "tree", ignore_errors=True)
        tmp.replace(base / "tree")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (base / "unpacked.sha256").write_text(spec.sha256 + "\n")
    return unpacked_tree(ws, spec)


def recipe_downloads(recipe: Recipe) -> list[DownloadSpec]:
    """Every download of the recipe once (components may share one)."""
    out: dict[str, DownloadSpec] = {}
    for comp in recipe.components:
        for d in comp.downloads:
            if d.name in out and out[d.name] != d:
                raise ConfigError(
                    f"{recipe.path.name}: download {d.name} is declared twice with other values",
                    hint="give every component the same url and sha256 for it (a YAML anchor)",
                )
            out[d.name] = d
    return list(out.values())


def provide_all(recipe: Recipe, ws: Workspace, mirror_dirs: tuple[Path, ...], offline: bool) -> dict[str, Path]:
    """Every download of the recipe, unpacked. Offline, all the missing ones are named in one error."""
    found: dict[str, Path] = {}
    missing: list[DownloadSpec] = []
    for spec in recipe_downloads(recipe):
        tree = provide(spec, ws, mirror_dirs, offline)
        if tree is None:
            missing.append(spec)
        else:
            found[spec.name] = tree
    if missing:
        names = "; ".join(f"{s.name} ({s.public}, sha256 {s.sha256})" for s in missing)
        files = ", ".join(s.file_name for s in missing)
        raise FetchError(
            f"offline: configure-time download(s) not cached and in no mirror dir: {names}",
            hint=f"run once without --offline, or put {files} in a --mirror-dir",
        )
    return found


def cmake_defines(comp: Component, trees: dict[str, Path]) -> tuple[tuple[str, str], ...]:
    """What the component's configure gets so that FetchContent downloads nothing."""
    if not comp.downloads:
        return ()
    return (*((d.cmake_variable, str(trees[d.name])) for d in comp.downloads), DISCONNECTED)


# --------------------------------------------------------------------------- the pinned tree's own record


def locked_dependency(text: str, name: str) -> tuple[tuple[str, ...], str | None] | None:
    """The URLs and sha256 a MODULE.cmake.lock-style file records for ``name``
    (``set(IREE_DEP_<ID>_URLS "..." ...)``, ``set(IREE_DEP_<ID>_SHA256 "...")``); None when it
    does not name it. Pure."""
    ident = re.sub(r"[^A-Z0-9]", "_", name.upper())
    urls = re.search(rf"set\(\s*IREE_DEP_{ident}_URLS\s+((?:\"[^\"]*\"\s*)+)\)", text)
    sha = re.search(rf"set\(\s*IREE_DEP_{ident}_SHA256\s+\"([0-9a-fA-F]*)\"\s*\)", text)
    if urls is None and sha is None:
        return None
    return (tuple(re.findall(r"\"([^\"]*)\"", urls.group(1))) if urls else ()), (sha.group(1).lower() if sha else None)


def check_against_lock(comp: Component, source_dir: Path) -> None:
    """A declared download must be what the pinned tree's own lock file records; a lock file
    that is missing or does not name it is only reported (the recipe's values are used)."""
    for d in comp.downloads:
        if d.lock is None:
            continue
        lock = source_dir / d.lock
        rec = locked_dependency(lock.read_text(errors="replace"), d.name) if lock.is_file() else None
        if rec is None:
            ui.warn(
                f"{comp.name}: {d.lock} in the pinned tree does not record {d.name}; using the recipe's url and sha256"
            )
            continue
        urls, sha = rec
        if d.url not in urls or sha != d.sha256:
            raise ConfigError(
                f"{comp.name}: the pinned tree's {d.lock} asks for {d.name} at {', '.join(urls) or '(no URL)'} "
                f"sha256 {sha}, the recipe gives {d.public} sha256 {d.sha256}",
                hint=f"copy the lock's url and sha256 into the recipe's downloads entry for {d.name}",
            )
