"""Fetch stage: get each pinned commit into a bare mirror in the workspace.

Order of places tried: the bare mirror already in the cache, a local mirror directory
(``<name>.git`` or ``<name>.bundle``), the pin's PyPI sdist mirrors, then the pin's URL
(not with ``offline``). The commit is verified after every fetch.
"""

from __future__ import annotations

import os
import re
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from onebit_build.sources import pkgindex

from onebit_build.core import ui
from onebit_build.spec.pins import Pin, SdistMirror
from onebit_build.core.errors import FetchError, IntegrityError, SpaceError, is_disk_full
from onebit_build.core.fsutil import sha256_file
from onebit_build.core.gitops import Git, init_bare
from onebit_build.core.names import file_part, member_problem
from onebit_build.core.workspace import Workspace



@dataclass(frozen=True, kw_only=True)
class FetchRequest:
    pin: Pin
    workspace: Workspace
    mirror_dirs: tuple[Path, ...] = ()
    offline: bool = False
    log: Path | None = None


@dataclass(frozen=True, kw_only=True)
class FetchResult:
    name: str
    url: str
    commit: str
    mirror_used: str  # "cache", "mirror-dir:<path>", "pypi-sdist:pkg==ver", or the URL
    archive_sha256: str | None
    bare_repo: Path
    resolved_from: str | None = None  # the abbreviated prefix, when the pin was one


def local_mirror_candidates(name: str, dirs: tuple[Path, ...]) -> list[Path]:
    """Existing ``<dir>/<name>.git`` or ``<dir>/<name>.bundle`` entries, in order."""
    out = []
    for d in dirs:
        for suffix in (".git", ".bundle"):
            p = d / f"{name}{suffix}"
            if p.exists():
                out.append(p)
    return out


def _pinned_ref(sha: str) -> str:
    return f"refs/onebit/pinned/{sha}"


def _try_fetch(bare: Git, source: str, pin: Pin, *, is_bundle: bool) -> tuple[bool, str]:
    """Fetch the pinned commit from ``source`` into ``bare``: exact SHA shallowly first,
    then every ref as a fallback. Returns whether the commit (or, for an abbreviated pin,
    at least one object) arrived, and git's last complaint when it did not. A full disk
    is an error of its own: the half-written pack is removed first."""
    complaint = ""
    if pin.resolved and not is_bundle:
        for depth in (("--depth=1",), ()):
            r = bare.run("fetch", "--no-tags", *depth, source, pin.commit, check=False)
            _raise_if_disk_full(bare, r.err, pin)
            if r.status == 0 and bare.has_commit(pin.commit):
                return True, ""
            complaint = last_line(r.err) or complaint
    # --update-shallow: a shallow mirror's refs come with their shallow roots, else git keeps the
    # objects but rejects the refs, and a later "cached" commit would lack its boundary.
    r = bare.run("fetch", "--no-tags", "--update-shallow", source, f"+refs/*:refs/onebit/from/{file_part(pin.name)}/*",
                 check=False)
    _raise_if_disk_full(bare, r.err, pin)
    if r.status != 0:
        return False, last_line(r.err) or complaint
    if pin.resolved:
        return (True, "") if bare.has_commit(pin.commit) else (False, f"{pin.commit[:12]} is not among its refs")
    return True, ""


def _raise_if_disk_full(bare: Git, err: str, pin: Pin) -> None:
    if "No space left on device" not in (err or ""):
        return
    removed = 0
    half = ("objects/pack/tmp_*", "objects/??/tmp_obj_*", "objects/incoming-*", "shallow.lock", "*.lock")
    for tmp in [p for pattern in half for p in bare.where.glob(pattern)]:
        removed += tmp.stat().st_size if tmp.is_file() else 0
        shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
    raise SpaceError(
        f"no space left on device at {bare.where} while fetching {pin.name} (needs about "
        f"{max(removed, 1 << 20) / 1e6:.0f} MB more than was free)",
        hint="free some space or use another --workspace; the half-written pack was removed",
    )


def store_damage(g: Git) -> str | None:
    """What is damaged in a git store (a pack that does not match its index, a missing
    object), or None when its objects are all there. Cheap: no blob is inflated."""
    r = g.run("fsck", "--connectivity-only", "--no-dangling", "--no-progress", check=False)
    if r.status == 0:
        return None
    lines = [re.sub(r"^(fatal|error):\s*", "", ln.strip()) for ln in (r.err or r.out).splitlines() if ln.strip()]
    return lines[0] if lines else f"git fsck exited {r.status}"


def last_line(text: str) -> str:
    """The last non-empty line of git's stderr, without its 'fatal:'/'error:' prefix."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    if not lines:
        return ""
    return re.sub(r"^(fatal|error):\s*", "", lines[-1])


def _bundle_hint(cand: Path, complaint: str) -> str:
    if cand.suffix == ".bundle" and ("did not send all necessary objects" in complaint or "prerequisite" in complaint):
        return (f"{complaint}; a bundle made from a shallow clone lacks the parents it names: use a bare "
                f"{cand.stem}.git mirror instead")
    return complaint


def resolve_prefix(bare: Git, pin: Pin) -> str:
    """The one commit whose SHA starts with the pin's abbreviation."""
    r = bare.run("rev-parse", f"--disambiguate={pin.commit}", check=False)
    commits = [sha for sha in r.out.split() if bare.has_commit(sha)]
    if not commits:
        raise FetchError(
            f"source {pin.name}: no commit starting with {pin.commit} in {pin.url}",
            hint="check the pin in pins.yaml against the repository",
        )
    if len(commits) > 1:
        raise FetchError(
            f"source {pin.name}: abbreviated commit {pin.commit} is ambiguous "
            f"({', '.join(c[:12] for c in sorted(commits))})",
            hint="give more hex digits (ideally the full SHA) in pins.yaml",
        )
    return commits[0]


def _verify(bare: Git, sha: str, pin: Pin, where: str) -> None:
    got = bare.out("rev-parse", "--verify", f"{sha}^{{commit}}")
    if got != sha:
        raise IntegrityError(f"source {pin.name}: {where} gave {got}, not {sha}",
                             hint="the mirror is corrupt; remove it")
    bare.run("update-ref", _pinned_ref(sha), sha)


def fetch(req: FetchRequest) -> FetchResult:
    """The pinned commit in the workspace's git store, from the first place that has it:
    the store itself, a mirror folder, a PyPI sdist that carries it, the network."""
    pin = req.pin
    bare_path = req.workspace.bare_repo(pin.name)
    bare = _open_store(bare_path, pin, req.log)
    tried: list[str] = []
    sha, used, archive = (_from_cache(bare, req, tried) or _from_mirror_dirs(bare, req, tried)
                          or _from_sdists(bare, req, tried) or _from_network(bare, req, tried))
    _verify(bare, sha, pin, used)
    return FetchResult(
        name=pin.name, url=pin.url, commit=sha, mirror_used=used, archive_sha256=archive,
        bare_repo=bare_path, resolved_from=None if pin.resolved else pin.commit,
    )


# (commit, where it came from, sha256 of the archive it came in)
Found = tuple[str, str, str | None]


def _open_store(bare_path: Path, pin: Pin, log: Path | None) -> Git:
    """The source's git store; a damaged one is replaced by a fresh one."""
    bare = init_bare(bare_path, log=log)
    if any(bare_path.glob("objects/pack/*.pack")) or any(bare_path.glob("objects/??")):
        damage = store_damage(bare)
        if damage:
            ui.warn(f"fetch {pin.name}: the cached git store {bare_path} is damaged ({damage}); "
                    "fetching into a fresh one")
            shutil.rmtree(bare_path)
            bare = init_bare(bare_path, log=log)
    return bare


def _fetched(bare: Git, pin: Pin) -> str | None:
    """The pinned commit once a fetch brought it (an abbreviated pin resolved), else None."""
    sha = pin.commit if pin.resolved else resolve_prefix(bare, pin)
    return sha if bare.has_commit(sha) else None


def _from_cache(bare: Git, req: FetchRequest, tried: list[str]) -> Found | None:
    pin = req.pin
    if pin.resolved and bare.has_commit(pin.commit):
        return pin.commit, "cache", _cached_archive_sha(req.workspace, pin)
    if not pin.resolved:
        r = bare.run("rev-parse", f"--disambiguate={pin.commit}", check=False)
        if any(bare.has_commit(s) for s in r.out.split()):
            return resolve_prefix(bare, pin), "cache", None
    tried.append(f"cache {bare.where}")
    return None


def _from_mirror_dirs(bare: Git, req: FetchRequest, tried: list[str]) -> Found | None:
    pin = req.pin
    for cand in local_mirror_candidates(pin.name, req.mirror_dirs):
        ui.detail(f"fetch {pin.name}: trying mirror {cand}")
        ok, complaint = _try_fetch(bare, str(cand), pin, is_bundle=cand.suffix == ".bundle")
        if ok and (sha := _fetched(bare, pin)):
            return sha, f"mirror-dir:{cand}", None
        if cand.suffix == ".git" and (damage := store_damage(Git(cand, log=req.log, bare=True))):
            complaint = f"damaged: {damage}; repair it (git fsck) or remove it from the mirror folder"
            # Said here, once: when a later source rescues the fetch, no error would name it.
            ui.warn(f"fetch {pin.name}: mirror {cand} is {complaint}; trying the next source")
        tried.append(f"mirror {cand}" + (f" ({_bundle_hint(cand, complaint)})" if complaint else ""))
    return None


def _from_sdists(bare: Git, req: FetchRequest, tried: list[str]) -> Found | None:
    pin, ws = req.pin, req.workspace
    for m in pin.mirrors:
        store, archive_sha = sdist_git_store(m, ws=ws, offline=req.offline, log=req.log)
        if store is not None:
            damage = store_damage(Git(store, log=req.log, bare=True))
            if damage:
                ui.warn(f"fetch {pin.name}: the unpacked store of {m.label} is damaged ({damage}); unpacking it again")
                drop_sdist_store(m, ws=ws)
                store, archive_sha = sdist_git_store(m, ws=ws, offline=req.offline, log=req.log)
        if store is None:
            tried.append(f"{m.label} (not cached; offline)")
            continue
        ui.detail(f"fetch {pin.name}: trying {m.label}")
        if _try_fetch(bare, str(store), pin, is_bundle=False)[0] and (sha := _fetched(bare, pin)):
            return sha, m.label, archive_sha
        tried.append(f"{m.label} (commit not in its git store)")
    return None


def _from_network(bare: Git, req: FetchRequest, tried: list[str]) -> Found:
    pin = req.pin
    if req.offline:
        raise FetchError(
            f"offline: source {pin.name} at {pin.commit} is not available (looked in: {'; '.join(tried)})",
            hint=f"run once without --offline, or put {pin.name}.git / {pin.name}.bundle in a --mirror-dir",
        )
    ui.detail(f"fetch {pin.name}: trying {pin.url}")
    if _try_fetch(bare, pin.url, pin, is_bundle=False)[0]:
        if sha := _fetched(bare, pin):
            return sha, pin.url, None
        raise FetchError(
            f"source {pin.name}: commit {pin.commit} is not in {pin.url}",
            hint="check the pin in pins.yaml (was the commit force-pushed away?)",
        )
    tried.append(pin.url)
    raise FetchError(
        f"source {pin.name}: could not fetch {pin.commit} (tried: {'; '.join(tried)})",
        hint=f"check the network, or provide {pin.name}.git / {pin.name}.bundle with --mirror-dir",
    )


# --------------------------------------------------------------------------- sdist mirror


def _sdist_dir(ws: Workspace, m: SdistMirror) -> Path:
    """Keyed by the pinned sha256 too: a new pin never reuses another file's store."""
    return ws.downloads / f"{file_part(m.package)}-{file_part(m.version)}-{m.sha256[:16]}"


def _cached_archive_sha(ws: Workspace, pin: Pin) -> str | None:
    for m in pin.mirrors:
        marker = _sdist_dir(ws, m) / "archive.sha256"
        if marker.exists() and marker.read_text().strip() == m.sha256:
            return m.sha256
    return None


def safe_extract(archive: Path, dest: Path, *, only_prefix: str | None = None) -> int:
    """Extract a tar archive into ``dest`` refusing anything that could land outside it.
    With ``only_prefix`` only members below that path are extracted. Returns the count."""
    count = 0
    with tarfile.open(archive, "r:*") as tar:
        members = []
        for mem in tar:
            why = member_problem(mem.name, link=mem.linkname if (mem.issym() or mem.islnk()) else None,
                                 symlink=mem.issym(), hardlink=mem.islnk())
            if why:
                raise IntegrityError(
                    f"{archive.name}: unsafe member {mem.name!r}: {why}",
                    hint="the archive is malformed or hostile; nothing was extracted outside the cache",
                )
            if only_prefix and not (mem.name == only_prefix or mem.name.startswith(only_prefix.rstrip("/") + "/")):
                continue
            members.append(mem)
        kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(dest, members=members, **kwargs)
        count = len(members)
    return count


def sdist_store_cached(m: SdistMirror, *, ws: Workspace) -> bool:
    """Whether the git store of an sdist mirror is already unpacked in the workspace, from
    the pinned bytes."""
    base = _sdist_dir(ws, m)
    marker = base / "archive.sha256"
    return (base / "store" / m.git_dir).is_dir() and marker.exists() and marker.read_text().strip() == m.sha256


def _kept_archive(base: Path) -> Path | None:
    files = sorted(p for p in base.glob("*") if p.is_file() and p.name.endswith((".tar.gz", ".tgz", ".tar")))
    return files[0] if len(files) == 1 else None


def drop_sdist_store(m: SdistMirror, *, ws: Workspace) -> None:
    """Forget an unpacked store (it is damaged); the verified archive is kept when intact."""
    base = _sdist_dir(ws, m)
    (base / "archive.sha256").unlink(missing_ok=True)
    shutil.rmtree(base / "store", ignore_errors=True)


def sdist_git_store(m: SdistMirror, *, ws: Workspace, offline: bool,
                    log: Path | None) -> tuple[Path | None, str | None]:
    """The git store of an sdist mirror, unpacked in the workspace; cached.

    The sdist is fetched from the package index configured for pip without running pip's
    resolver or any build backend, its sha256 is checked, and only then is the git store
    extracted (members checked, tar's data filter on)."""
    base = _sdist_dir(ws, m)
    store = base / "store" / m.git_dir
    marker = base / "archive.sha256"
    if sdist_store_cached(m, ws=ws):
        return store, m.sha256
    archive = _kept_archive(base) if base.is_dir() else None
    if archive is not None and sha256_file(archive) != m.sha256:
        ui.warn(f"{archive}: kept sdist is damaged (sha256 differs); fetching it again")
        archive.unlink()
        archive = None
    if archive is None:
        if offline:  # nothing made: no empty folder is left for a pin that was never fetched
            return None, None
        archive = _download(m, base, log)
    tmp = base / "store.tmp"
    try:
        top = _top_dir(archive)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            n = safe_extract(archive, tmp, only_prefix=f"{top}/{m.git_dir}")
        except OSError as exc:
            if is_disk_full(exc):
                raise SpaceError(
                    f"no space left on device at {base} while unpacking {archive.name} (needs about "
                    f"{_unpacked_size(archive, top, m.git_dir) / 1e6:.0f} MB)",
                    hint="free some space or use another --workspace; the partial store was removed",
                ) from None
            raise
        if n == 0 or not (tmp / top / m.git_dir).is_dir():
            raise FetchError(f"{archive.name}: holds no {m.git_dir}", hint="check git-dir of the mirror in pins.yaml")
        _detach_store(tmp / top / m.git_dir, log)
        final = base / "store"
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp / top, final)
        marker.write_text(m.sha256 + "\n")
        return final / m.git_dir, m.sha256
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _download(m: SdistMirror, base: Path, log: Path | None) -> Path:
    """The pinned sdist fetched into ``base``; a folder made for it is removed again when
    the download fails (an empty one would look like a cached mirror)."""
    made = not base.exists()
    base.mkdir(parents=True, exist_ok=True)
    ui.info(f"  downloading {m.package}=={m.version} (sdist mirror; nothing is run from it)")
    try:
        return pkgindex.fetch_pinned(m.package, m.version, want_sha256=m.sha256, dest_dir=base, kind="sdist", log=log)
    except BaseException:
        if made and not any(base.iterdir()):
            base.rmdir()
        raise


def _unpacked_size(archive: Path, top: str, git_dir: str) -> int:
    prefix = f"{top}/{git_dir}/"
    with tarfile.open(archive, "r:*") as tar:
        return sum(mem.size for mem in tar if mem.name.startswith(prefix))


def _detach_store(store: Path, log: Path | None) -> None:
    """A submodule's git store names a work tree that the sdist does not ship unpacked
    next to it; make the copy a plain bare repository so that git can serve from it."""
    g = Git(store.parent, log=log)
    g.run("config", "--file", str(store / "config"), "--unset-all", "core.worktree", check=False)
    g.run("config", "--file", str(store / "config"), "core.bare", "true")


def _top_dir(archive: Path) -> str:
    with tarfile.open(archive, "r:*") as tar:
        for mem in tar:
            return PurePosixPath(mem.name).parts[0]
    raise FetchError(f"{archive.name}: empty archive", hint="check the mirror entry in pins.yaml")
