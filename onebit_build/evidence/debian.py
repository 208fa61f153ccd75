"""Which Debian package owns a file, with its version and purl, from dpkg's own database
(``dpkg-query``). On a system without dpkg, or for a file no package owns, nothing is said.

dpkg records a file by the path its package ships it at; with a merged ``/usr`` the loader
may find it under the other name (``/lib/x86_64-linux-gnu/libc.so.6`` is shipped as such,
``libstdc++.so.6`` under ``/usr/lib``), and a compiler is reached through links
(``/usr/bin/cc``): each path is asked for under every one of those names.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from packageurl import PackageURL

from onebit_build.core.proc import capture

_USR_MERGED = ("/lib", "/lib64", "/bin", "/sbin")
_GLOB = re.compile(r"[*?\[\]\\]")  # dpkg-query -S takes a pattern: such a path is never asked
_OWNER = re.compile(r"^(?P<pkgs>[^:\s][^:]*(?::[a-z0-9-]+)?(?:, [^:\s][^:]*(?::[a-z0-9-]+)?)*): (?P<path>/.*)$")


@dataclass(frozen=True, kw_only=True)
class Distro:
    id: str  # debian, ubuntu
    version_id: str  # 12, 24.04

    @property
    def qualifier(self) -> str:
        return f"{self.id}-{self.version_id}" if self.version_id else self.id


@dataclass(frozen=True, kw_only=True)
class DebPackage:
    name: str
    version: str
    arch: str

    def purl(self, distro: Distro | None) -> str:
        qualifiers = {"arch": self.arch, **({"distro": distro.qualifier} if distro else {})}
        return PackageURL(type="deb", namespace=distro.id if distro else "debian", name=self.name,
                          version=self.version, qualifiers=qualifiers).to_string()


def distro() -> Distro | None:
    """The system's distribution from os-release; None when it has none."""
    try:
        rel = platform.freedesktop_os_release()
    except OSError:
        return None
    ident = re.sub(r"[^a-z0-9.-]", "", rel.get("ID", "").lower())
    return Distro(id=ident, version_id=re.sub(r"[^A-Za-z0-9.]", "", rel.get("VERSION_ID", ""))) if ident else None


def names_of(path: Path) -> list[str]:
    """The names dpkg may record ``path`` under: its links followed (the file itself first),
    as given, and each of those with or without the ``/usr`` prefix of a merged ``/usr``. Pure but for realpath."""
    out: list[str] = []
    for p in (os.path.realpath(path), str(path)):
        for top in _USR_MERGED:
            if p.startswith(top + "/"):
                out += [p, "/usr" + p]
            elif p.startswith("/usr" + top + "/"):
                out += [p, p[len("/usr"):]]
        out.append(p)
    return [p for p in dict.fromkeys(out) if not _GLOB.search(p)]


def parse_search(text: str) -> dict[str, str]:
    """``dpkg-query -S`` output -> {path: package[:arch]} (the first owner of each). Pure."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        m = _OWNER.match(line.strip())
        if m and not line.startswith("diversion by"):
            found.setdefault(m.group("path"), m.group("pkgs").split(", ")[0])
    return found


def parse_show(text: str) -> dict[str, DebPackage]:
    """``dpkg-query -W -f '${Package}\\t${Architecture}\\t${Version}\\n'`` output -> {name:arch: package}."""
    out: dict[str, DebPackage] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and all(parts):
            pkg = DebPackage(name=parts[0], arch=parts[1], version=parts[2])
            out[f"{pkg.name}:{pkg.arch}"] = pkg
            out.setdefault(pkg.name, pkg)
    return out


def owners(paths: Iterable[Path]) -> dict[Path, DebPackage]:
    """{path: the installed package that owns it} for each path some package owns."""
    names = {p: names_of(p) for p in paths}
    asked = sorted({n for ns in names.values() for n in ns})
    if not asked:
        return {}
    search = capture(["dpkg-query", "-S", *asked], timeout=60)
    if search.returncode is None:  # no dpkg here
        return {}
    owner_of = parse_search(search.stdout)
    pkgs = sorted(set(owner_of.values()))
    if not pkgs:
        return {}
    shown = parse_show(capture(["dpkg-query", "-W", "-f", "${Package}\t${Architecture}\t${Version}\n", *pkgs],
                               timeout=60).stdout)
    out: dict[Path, DebPackage] = {}
    for p, ns in names.items():
        owner = next((owner_of[n] for n in ns if n in owner_of), None)
        if owner is not None and owner in shown:
            out[p] = shown[owner]
    return out
