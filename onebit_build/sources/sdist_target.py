"""The commit a new version of a pin's sdist mirror carries, for ``pins bump --to-sdist``.

The version's sdist is found on the package index pip is configured with; its sha256 is the
one the index lists (a local find-links file is hashed here), so that the download is checked
before anything is unpacked, exactly as for a pinned mirror. The commit is the HEAD of the git
store the sdist carries (a submodule's store: its checked-out commit), verified by git.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from onebit_build.sources import pkgindex
from onebit_build.sources.fetch import sdist_git_store
from onebit_build.core.errors import ConfigError, FetchError, IntegrityError
from onebit_build.core.fsutil import sha256_file
from onebit_build.core.gitops import Git
from onebit_build.core.names import public_url
from onebit_build.spec.pins import FULL_SHA, Pin, SdistMirror
from onebit_build.spec.pins_edit import same_package
from onebit_build.core.workspace import Workspace


@dataclass(frozen=True, kw_only=True)
class SdistTarget:
    mirror: SdistMirror  # the new mirror entry, sha256 included
    commit: str  # the commit its git store carries


def mirror_of(pin: Pin, package: str) -> SdistMirror:
    """The pin's sdist mirror of ``package``; ConfigError when it has none."""
    found = next((m for m in pin.mirrors if same_package(m.package, package)), None)
    if found is None:
        have = ", ".join(m.label for m in pin.mirrors) or "none"
        raise ConfigError(f"source {pin.name} has no pypi-sdist mirror of {package} (its mirrors: {have})",
                          hint="--to-sdist names the package of the pin's own sdist mirror; use --to COMMIT otherwise")
    return found


def index_sha256(package: str, version: str, *, log: Path | None) -> str:
    """The sha256 of ``package==version``'s sdist as the configured index lists it."""
    cfg = pkgindex.load_index_config(log=log)
    found, problems = pkgindex.find_file(cfg, package, version, pkgindex.sdist_matches)
    if not found:
        extra = f" ({'; '.join(problems)})" if problems else ""
        raise FetchError(f"{package}=={version}: no sdist on the package index{extra}",
                         hint="check the version ('pip index versions NAME' lists them) and the index settings of pip")
    listed = {c.sha256 for c in found if c.sha256}
    for c in found:
        local = pkgindex._local_path(c.url) if not c.sha256 else None
        if local is not None and local.is_file():
            listed.add(sha256_file(local))
    if len(listed) > 1:
        raise IntegrityError(f"{package}=={version}: the configured locations offer different files "
                             f"({', '.join(sorted(s[:16] for s in listed))})",
                             hint="configure one index for it; the move is not made from an ambiguous file")
    if not listed:
        raise IntegrityError(f"{package}=={version}: {public_url(found[0].url)} lists no sha256 for its sdist",
                             hint="use an index that lists hashes (PEP 503 '#sha256=' or PEP 691), or move the pin "
                                  "by hand with the sha256 you checked")
    return listed.pop()


def sdist_target(pin: Pin, package: str, version: str, *, ws: Workspace, log: Path | None) -> SdistTarget:
    """The new mirror entry of ``pin`` and the commit it carries (downloaded and unpacked into
    the workspace's downloads, sha256-checked first)."""
    old = mirror_of(pin, package)
    sha = index_sha256(old.package, version, log=log)
    mirror = SdistMirror(package=old.package, version=version, sha256=sha, git_dir=old.git_dir)
    store, _ = sdist_git_store(mirror, ws=ws, offline=False, log=log)
    if store is None:
        raise FetchError(f"{mirror.label}: its git store could not be unpacked", hint="run again with -v")
    commit = Git(store, log=log, bare=True).run("rev-parse", "--verify", "HEAD^{commit}", check=False).out.strip()
    if not FULL_SHA.match(commit):
        raise FetchError(f"{mirror.label}: the git store {old.git_dir} has no checked-out commit",
                         hint="name the commit with --to COMMIT as well")
    return SdistTarget(mirror=mirror, commit=commit)
