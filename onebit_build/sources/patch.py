"""Patch stage: check out a pinned commit at its canonical path and apply the patch series.

The prepared tree lives at ``<workspace>/src/<name>-<commit12>-<digest12>``: identical
inputs give the identical absolute path. Patches are applied as commits with a fixed
identity and date, so the patched commit is deterministic. The tree is built in a
temporary directory and renamed into place only when every patch applied.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from onebit_build.core import ui
from onebit_build.core.errors import CommandError, PatchError, SpaceError, is_disk_full
from onebit_build.core.fsutil import read_state, write_state, StateError
from onebit_build.core.gitops import FIXED_IDENTITY, Git
from onebit_build.core.names import file_part, patch_number
from onebit_build.core.workspace import Workspace

STAMP_KIND = "onebit-build/prepared-tree"
STAMP_SCHEMA = 1


@dataclass(frozen=True, kw_only=True)
class PatchFile:
    name: str
    path: Path
    sha256: str


@dataclass(frozen=True, kw_only=True)
class PrepareRequest:
    source: str
    commit: str  # full SHA, already in the bare mirror
    bare_repo: Path
    patches: tuple[PatchFile, ...]
    workspace: Workspace
    log: Path | None = None


@dataclass(frozen=True, kw_only=True)
class PreparedTree:
    source: str
    path: Path
    commit: str
    head: str  # the patched commit
    patches: tuple[PatchFile, ...]
    patch_digest: str
    reused: bool


def list_patches(patch_root: Path, source: str) -> tuple[PatchFile, ...]:
    """The series for ``source``: ``patches/<source>/NNNN-*.patch`` in numeric order."""
    d = patch_root / source
    if not d.is_dir():
        return ()
    out = []
    numbers: dict[str, str] = {}
    for p in sorted(d.iterdir()):
        if p.suffix != ".patch":
            continue
        number = patch_number(p.name)
        if number is None:
            raise PatchError(f"{p}: patch file name must be NNNN-name.patch",
                             hint="rename it, e.g. 0003-fix-something.patch")
        if number in numbers:
            raise PatchError(f"{p}: number {number} is used twice (also {numbers[number]})", hint="renumber the series")
        numbers[number] = p.name
        out.append(PatchFile(name=p.name, path=p, sha256=hashlib.sha256(p.read_bytes()).hexdigest()))
    return tuple(out)


def patch_digest(commit: str, patches: tuple[PatchFile, ...]) -> str:
    """Identity of a prepared tree: the pinned commit plus the names and bytes of its patches."""
    h = hashlib.sha256()
    h.update(f"commit {commit}\n".encode())
    for p in patches:
        h.update(f"patch {p.name} {p.sha256}\n".encode())
    return h.hexdigest()


def tree_stem(source: str, commit: str) -> str:
    """How a prepared tree's folder name starts: the source and the first 12 digits of its
    commit (the digest of its patches follows). Pure."""
    return f"{file_part(source)}-{commit[:12]}"


def canonical_path(ws: Workspace, source: str, commit: str, digest: str) -> Path:
    return ws.src_dir / f"{tree_stem(source, commit)}-{digest[:12]}"


def newest_prepared(src_dir: Path, source: str, commit: str) -> Path | None:
    """The newest prepared tree of ``source`` at ``commit`` (full or abbreviated) in a
    workspace's sources folder, whatever its patches; None when there is none."""
    if not src_dir.is_dir():
        return None
    found = sorted(src_dir.glob(f"{tree_stem(source, commit)}*-*"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _stamp_path(tree: Path) -> Path:
    return tree / ".git" / "onebit-build-stamp.json"


def _is_reusable(tree: Path, req: PrepareRequest, digest: str) -> tuple[bool, str]:
    """(reusable, reason). Reusable only when the stamp matches and the tree is clean."""
    if not tree.exists():
        return False, "absent"
    try:
        stamp = read_state(_stamp_path(tree), STAMP_KIND, STAMP_SCHEMA)
    except (FileNotFoundError, StateError):
        return False, "no valid stamp"
    if stamp.get("commit") != req.commit or stamp.get("digest") != digest:
        return False, "stamp differs"
    g = Git(tree, log=req.log)
    head = g.run("rev-parse", "HEAD", check=False).out.strip()
    if head != stamp.get("head"):
        return False, f"HEAD moved to {head[:12]}"
    status = g.run("status", "--porcelain", "--untracked-files=all", check=False)
    if status.status != 0:
        return False, "git status failed"
    if status.out.strip():
        return False, "local changes"
    return True, "clean"


def prepare(req: PrepareRequest) -> PreparedTree:
    digest = patch_digest(req.commit, req.patches)
    tree = canonical_path(req.workspace, req.source, req.commit, digest)
    ok, reason = _is_reusable(tree, req, digest)
    if ok:
        stamp = read_state(_stamp_path(tree), STAMP_KIND, STAMP_SCHEMA)
        return PreparedTree(source=req.source, path=tree, commit=req.commit, head=stamp["head"], patches=req.patches,
                            patch_digest=digest, reused=True)
    if tree.exists():
        if reason == "local changes":
            keep = tree.with_name(f"{tree.name}.changed-{time.strftime('%Y%m%d-%H%M%S')}")
            ui.warn(f"prepared tree {tree} has local changes; moved to {keep} and preparing a fresh one")
            os.replace(tree, keep)
        else:
            ui.detail(f"prepared tree {tree}: {reason}; preparing again")
            shutil.rmtree(tree)
    tree.parent.mkdir(parents=True, exist_ok=True)
    tmp = tree.with_name(f".{tree.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        head = _make_tree(tmp, req, digest)
        os.replace(tmp, tree)
    except (CommandError, OSError) as exc:
        _raise_if_disk_full(exc, tmp, req)
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return PreparedTree(source=req.source, path=tree, commit=req.commit, head=head, patches=req.patches,
                        patch_digest=digest, reused=False)


def _make_tree(tmp: Path, req: PrepareRequest, digest: str) -> str:
    """Check the pinned commit out into the empty folder ``tmp``, apply the patches, stamp it.
    Returns the patched HEAD."""
    g = Git(tmp, log=req.log)
    g.run("init", "-q", ".")
    g.run("config", "core.autocrlf", "false")
    g.run("fetch", "-q", "--no-tags", "--depth=1", str(req.bare_repo), req.commit, what=f"checkout of {req.source}")
    g.run("checkout", "-q", "--detach", req.commit)
    base = g.out("rev-parse", "HEAD")
    if base != req.commit:
        raise PatchError(f"{req.source}: checkout gave {base}, not {req.commit}",
                         hint="remove the workspace's git mirror and fetch again")
    for p in req.patches:
        _apply_one(g, p, req)
    head = g.out("rev-parse", "HEAD")
    write_state(_stamp_path(tmp), STAMP_KIND, STAMP_SCHEMA, {
        "source": req.source, "commit": req.commit, "digest": digest, "head": head,
        "patches": [{"name": p.name, "sha256": p.sha256} for p in req.patches],
    })
    return head


def _raise_if_disk_full(exc: Exception, tmp: Path, req: PrepareRequest) -> None:
    """A git that failed (or a write) because the disk is full fails as the other stages do:
    exit 13, the folder and about how much it needs. Git says so only sometimes ("invalid
    index-pack output" is all a full disk may leave), so the free space decides too: less
    than the checkout needs, counting what this attempt has written."""
    need = _checkout_bytes(req) * 2  # the files and, at most as large, their objects
    said = is_disk_full(exc) if isinstance(exc, OSError) else "No space left on device" in (exc.tail or "")
    try:
        room = shutil.disk_usage(tmp.parent).free + _bytes_under(tmp)
    except OSError:
        room = need
    if said or room < need:
        raise SpaceError(f"no space left on device at {tmp.parent} while preparing {req.source} (needs about "
                         f"{max(need, 1 << 20) / 1e6:.0f} MB there, {room / 1e6:.0f} MB free)",
                         hint="free some space or use another --workspace; the partial tree was removed") from None


def _checkout_bytes(req: PrepareRequest) -> int:
    """The size of the pinned commit's files, from the git store (no checkout needed)."""
    r = Git(req.bare_repo, bare=True).run("ls-tree", "-r", "-l", "--full-tree", req.commit, check=False)
    sizes = (line.split()[3] for line in r.out.splitlines() if len(line.split()) > 4)
    return sum(int(n) for n in sizes if n.isdigit())


def _bytes_under(folder: Path) -> int:
    return sum(p.lstat().st_size for p in folder.rglob("*") if not p.is_dir() or p.is_symlink())


def _apply_one(g: Git, p: PatchFile, req: PrepareRequest) -> None:
    text = p.path.read_bytes()
    is_mail = text.startswith(b"From ") or b"\nSubject: " in text[:2000]
    env = dict(FIXED_IDENTITY)
    try:
        if is_mail:
            g.run("am", "-q", "--keep-cr", "--no-3way", str(p.path), env=env, what=f"patch {p.name}")
        else:
            g.run("apply", "--index", str(p.path), env=env, what=f"patch {p.name}")
            env2 = {**env, "GIT_AUTHOR_DATE": env["GIT_COMMITTER_DATE"]}
            g.run("commit", "-q", "--no-verify", "-m", p.name.removesuffix(".patch"), env=env2,
                  what=f"commit of {p.name}")
    except CommandError as exc:
        failed = _failing_files(exc.tail)
        files = f"; failing files: {', '.join(failed)}" if failed else ""
        raise PatchError(
            f"{req.source}: patch {p.name} does not apply to {req.commit[:12]}{files}",
            hint=(
                f"regenerate it against the pinned commit: check out {req.commit[:12]}, apply the patches "
                f"before it, redo the change by hand, commit, and write the series with "
                f"'git format-patch {req.commit[:12]}..HEAD' into patches/{req.source}/"
            ),
            detail=exc.tail,
        ) from None


def _failing_files(git_output: str) -> list[str]:
    """File names git names in 'patch failed: FILE:LINE' or 'FILE: does not exist' lines. Pure."""
    files = []
    for line in git_output.splitlines():
        m = (re.search(r"patch failed: ([^:]+):\d+", line)
             or re.search(r"error: ([^:]+): (does not exist|No such file)", line))
        if m and m.group(1) not in files:
            files.append(m.group(1))
    return files


def export_series(tree: PreparedTree, dest: Path, *, log: Path | None = None) -> list[Path]:
    """Write the prepared tree's commits after the pin back as ``NNNN-subject.patch`` files,
    replacing the series in ``dest`` in one step."""
    g = Git(tree.path, log=log)
    count = int(g.out("rev-list", "--count", f"{tree.commit}..HEAD"))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.export-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if count:
            g.run("format-patch", "-q", "--zero-commit", "--no-signature", "--no-stat", "-N",
                  "-o", str(tmp), f"{tree.commit}..HEAD", what="git format-patch")
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
        if dest.exists():
            os.replace(dest, old)
        os.replace(tmp, dest)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return sorted(dest.glob("*.patch"))
