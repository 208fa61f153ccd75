"""A build's runtime floor: what its programs need from the system that runs them, and
whether a system has it.

The floor is read from the ELF files alone, as the dynamic loader will judge them: every
``DT_NEEDED`` library that the file's RUNPATH does not supply (those travel with the build)
must be found on the system, and every symbol version the files ask of it
(``.gnu.version_r``: ``GLIBC_2.34`` of ``libc.so.6``, ``GLIBCXX_3.4.30`` of ``libstdc++.so.6``)
must be defined by the library found there (its ``.gnu.version_d``). Of each family of numbered
versions only the highest is kept: a library that defines it defines the lower ones too.

A system is a root folder: ``/`` for this box, or the root of a chroot or container that a
prefix is installed into. Its libraries are found as the loader finds them: the loader's
cache (for ``/``), then the folders of ``etc/ld.so.conf`` and the usual ones, links followed
inside the root.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerDefSection, GNUVerNeedSection

from onebit_build.building.elfdeps import read_elf, resolve

SCHEMA = 1
_NUMBERED = re.compile(r"^(?P<family>[A-Z][A-Z0-9_]*?)_(?P<number>\d+(?:\.\d+)*)$")
_DIRS = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "usr/lib64", "lib", "usr/lib",
         "usr/local/lib")
SHOWN_FAMILIES = ("GLIBC", "GLIBCXX", "CXXABI")  # what a person asks first: glibc and the C++ library


def version_key(version: str) -> tuple[str, tuple[int, ...]] | None:
    """``GLIBC_2.34`` -> ("GLIBC", (2, 34)); None for an unnumbered one (``GLIBC_PRIVATE``). Pure."""
    m = _NUMBERED.match(version)
    if m is None:
        return None
    return m.group("family"), tuple(int(n) for n in m.group("number").split("."))


def highest(versions: Iterable[str]) -> tuple[str, ...]:
    """The highest version of each numbered family, and every unnumbered one, sorted. Pure."""
    best: dict[str, tuple[tuple[int, ...], str]] = {}
    other: set[str] = set()
    for v in versions:
        key = version_key(v)
        if key is None:
            other.add(v)
        elif key[0] not in best or key[1] > best[key[0]][0]:
            best[key[0]] = (key[1], v)
    return tuple(sorted({v for _n, v in best.values()} | other))


def _version_sections(path: Path, kind: type) -> list:
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            out = []
            for section in elf.iter_sections():
                if isinstance(section, kind):
                    out += [(entry, [a.name for a in auxes]) for entry, auxes in section.iter_versions()]
            return out
    except (OSError, ELFError):
        return []


def version_needs(path: Path) -> dict[str, set[str]]:
    """{library: the symbol versions the file asks of it} (``.gnu.version_r``)."""
    needs: dict[str, set[str]] = {}
    for entry, names in _version_sections(path, GNUVerNeedSection):
        needs.setdefault(entry.name, set()).update(names)
    return needs


def version_defs(path: Path) -> set[str]:
    """The symbol versions a library defines (``.gnu.version_d``), its own name included."""
    return {names[0] for _entry, names in _version_sections(path, GNUVerDefSection) if names}


@dataclass(frozen=True, kw_only=True)
class Floor:
    """What the programs need of the system: {library: highest versions asked (may be none)},
    and, when known, the Debian packages that gave the building box those libraries."""

    needs: Mapping[str, tuple[str, ...]]
    packages: tuple[Mapping[str, Any], ...] = ()  # {name, version, libraries}

    def highest_of(self, family: str) -> str | None:
        """The highest ``family`` version any library is asked for (``GLIBC_2.34``), or None."""
        found = [v for vs in self.needs.values() for v in vs if (version_key(v) or ("",))[0] == family]
        return max(found, key=lambda v: version_key(v)[1], default=None)  # type: ignore[index]

    def package_of(self, library: str) -> Mapping[str, Any] | None:
        return next((p for p in self.packages if library in p.get("libraries", ())), None)

    def to_doc(self) -> dict[str, Any]:
        return {"schema": SCHEMA,
                "highest": {f: v for f in SHOWN_FAMILIES if (v := self.highest_of(f)) is not None},
                "needs": {lib: list(vs) for lib, vs in sorted(self.needs.items())},
                "packages": [dict(p) for p in self.packages]}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> "Floor":
        """The floor of a manifest's ``runtime_floor``; ValueError when it is not one."""
        if not isinstance(doc, Mapping) or doc.get("schema") != SCHEMA or not isinstance(doc.get("needs"), Mapping):
            raise ValueError("not a runtime floor of schema 1")
        needs = {str(k): tuple(str(v) for v in vs) for k, vs in doc["needs"].items()}
        packages = tuple(dict(p) for p in doc.get("packages") or () if isinstance(p, Mapping))
        return cls(needs=needs, packages=packages)


def floor_of(programs: Iterable[Path], packages: Iterable[Mapping[str, Any]] = ()) -> Floor:
    """The floor of ``programs``: followed through the libraries their RUNPATH supplies (which
    travel with them), every other library they ask for is the system's."""
    needs: dict[str, set[str]] = {}
    todo, seen = [Path(p) for p in programs], set()
    while todo:
        path = todo.pop()
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        info = read_elf(path)
        if info is None:
            continue
        carried = {}
        for name in info.needed:
            hit = resolve(name, info)
            if hit is not None:
                carried[name] = hit
                todo.append(hit)
            else:
                needs.setdefault(name, set())
        for lib, versions in version_needs(path).items():
            if lib not in carried:
                needs.setdefault(lib, set()).update(versions)
    return Floor(needs={lib: highest(vs) for lib, vs in sorted(needs.items())}, packages=tuple(packages))


# --------------------------------------------------------------------------- a system


@dataclass(frozen=True, kw_only=True)
class Shortfall:
    library: str
    version: str | None  # None: the library itself is not found
    has: str | None = None  # the highest version of that family the system's library defines

    def text(self, floor: Floor) -> str:
        if self.version is None:
            pkg = floor.package_of(self.library)
            return f"{self.library} is missing" + (f" (Debian package {pkg['name']})" if pkg else "")
        family = self.version.split("_")[0]
        has = f"the newest it has is {self.has}" if self.has else f"it has no {family} version"
        return f"{self.library} lacks {self.version} ({has})"


@dataclass(frozen=True, kw_only=True)
class System:
    """The libraries of the system under ``root`` as its loader would find them."""

    root: Path = Path("/")
    cache: Mapping[str, Path] = field(default_factory=dict)  # the loader's cache ({name: path}), for "/"

    def _inside(self, rel: str) -> Path:
        """``rel`` (an absolute path of the system) under the root, every link on the way
        followed as that system's loader would, never out of the root (``..`` at its top stays there)."""
        todo, done, hops = list(Path(rel).parts[1:]), [], 0
        while todo:
            part = todo.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                done = done[:-1]
                continue
            here = self.root.joinpath(*done, part)
            if here.is_symlink() and hops < 40:
                hops += 1
                target = os.readlink(here)
                done = [] if target.startswith("/") else done
                todo = [p for p in Path(target).parts if p != "/"] + todo
                continue
            done.append(part)
        return self.root.joinpath(*done)

    def folders(self) -> list[str]:
        """The loader's folders: those ``etc/ld.so.conf`` names (and the files it includes), then the usual ones."""
        found: list[str] = []
        todo = [str(self.root / "etc" / "ld.so.conf")]
        while todo:
            try:
                lines = Path(todo.pop(0)).read_text(errors="replace").splitlines()
            except OSError:
                continue
            for line in (ln.split("#", 1)[0].strip() for ln in lines):
                if line.startswith("include "):
                    pattern = line.split(None, 1)[1]
                    todo += sorted(glob.glob(str(self.root / pattern.lstrip("/"))))
                elif line.startswith("/"):
                    found.append(line)
        return found + ["/" + d for d in _DIRS]

    def find(self, library: str) -> Path | None:
        if library in self.cache and Path(self.cache[library]).exists():
            return Path(self.cache[library])
        for folder in self.folders():
            cand = self._inside(f"{folder}/{library}")
            if cand.is_file():
                return cand
        return None


def shortfalls(floor: Floor, system: System) -> list[Shortfall]:
    """What ``system`` lacks of ``floor``: missing libraries first, then missing versions."""
    missing, short = [], []
    for library, versions in sorted(floor.needs.items()):
        path = system.find(library)
        if path is None:
            missing.append(Shortfall(library=library, version=None))
            continue
        defined = version_defs(path)
        for v in versions:
            if v in defined:
                continue
            key = version_key(v)
            same = [d for d in defined if key is not None and (version_key(d) or ("",))[0] == key[0]]
            short.append(Shortfall(library=library, version=v,
                                   has=max(same, key=lambda d: version_key(d)[1], default=None)))  # type: ignore[index]
    return missing + short


def system_at(root: Path | None = None) -> System:
    """This box's system (with the loader's cache), or the one under ``root``."""
    if root is None or Path(root).resolve() == Path("/"):
        from onebit_build.evidence.runtime import loader_cache

        return System(root=Path("/"), cache=loader_cache("EM_X86_64"))
    return System(root=Path(root))


def refusal(floor: Floor, found: list[Shortfall], where: str) -> tuple[str, str]:
    """(the one line, the remedy) for a system that lacks part of ``floor``. Pure."""
    line = f"{where} cannot run this build: " + "; ".join(s.text(floor) for s in found)
    packages = sorted({p["name"] for s in found if s.version is None and (p := floor.package_of(s.library))})
    if all(s.version is None for s in found):
        return line, ("install them: apt-get install " + " ".join(packages) if packages else
                      "install the packages that give these libraries (apt-file search NAME finds them)")
    glibc = floor.highest_of("GLIBC")
    newer = f" (glibc {glibc.split('_', 1)[1]} or later)" if glibc else ""
    return line, (f"use a newer system{newer}, or build it on this one: leave out --from / --binary-cache"
                  + (f"; then apt-get install {' '.join(packages)}" if packages else ""))


def check_runs_here(floor: Floor, *, root: Path | None = None) -> None:
    """Raise RuntimeFloorError (one line, with its remedy) when the system lacks part of ``floor``."""
    from onebit_build.core.errors import RuntimeFloorError

    found = shortfalls(floor, system_at(root))
    if found:
        line, hint = refusal(floor, found, "this box" if root is None else f"the system in {root}")
        raise RuntimeFloorError(line, hint=hint)


def programs_of(paths: Iterable[Path]) -> list[Path]:
    """The files of ``paths`` that are programs (executable ELF files, not libraries)."""
    out = []
    for p in map(Path, paths):
        if p.is_file() and ".so" not in p.name and os.access(p, os.X_OK) and read_elf(p) is not None:
            out.append(p)
    return sorted(set(out))


def packages_here(libraries: Iterable[str]) -> tuple[dict[str, Any], ...]:
    """The Debian packages (name, version, libraries) that give this box these libraries."""
    from onebit_build.evidence import debian

    here = system_at(None)
    paths = {lib: path for lib in libraries if (path := here.find(lib)) is not None}
    owners = debian.owners(paths.values())
    packages: dict[str, dict[str, Any]] = {}
    for lib, path in sorted(paths.items()):
        pkg = owners.get(path)
        if pkg is not None:
            entry = packages.setdefault(pkg.name, {"name": pkg.name, "version": pkg.version, "libraries": []})
            entry["libraries"].append(lib)
    return tuple(packages.values())


def recorded_floor(outputs: Iterable[Path]) -> dict[str, Any]:
    """The manifest's ``runtime_floor`` of a build's outputs: the floor of its programs, with
    the Debian packages (name, version) that give this box the libraries they need."""
    floor = floor_of(programs_of(outputs))
    return Floor(needs=floor.needs, packages=packages_here(floor.needs)).to_doc()


def floor_for(programs: Iterable[Path], recorded: Mapping[str, Any] | None = None) -> Floor:
    """The floor of the programs about to be installed or started, read from their files, with
    the packages the build's manifest recorded (to name what to install)."""
    try:
        packages = Floor.from_doc(recorded).packages if recorded else None
    except ValueError:
        packages = None
    floor = floor_of(programs)
    # A manifest older than the record: this box's packages name what to install.
    return Floor(needs=floor.needs, packages=packages if packages is not None else packages_here(floor.needs))


def recorded_near(program: Path) -> dict[str, Any] | None:
    """The ``runtime_floor`` of the manifest beside a program: in its build folder or the
    ``share/onebit-build`` of its prefix; None when there is none to read."""
    for cand in (program.parent.parent / "build-manifest.json",
                 program.parent.parent / "share" / "onebit-build" / "build-manifest.json"):
        if cand.is_file():
            return recorded_in(cand)
    return None


def recorded_in(manifest: Path) -> dict[str, Any] | None:
    """A manifest file's ``runtime_floor``; None when it has none or cannot be read."""
    import json

    from onebit_build.core.safepath import read_regular

    try:
        doc = json.loads(read_regular(manifest, limit=64 << 20))
    except (OSError, ValueError):
        return None
    floor = doc.get("runtime_floor") if isinstance(doc, dict) else None
    return floor if isinstance(floor, dict) else None


def check_program(program: Path, *, root: Path | None = None, recorded: Mapping[str, Any] | None = None) -> None:
    """Refuse (RuntimeFloorError) to install or start ``program`` where it cannot run."""
    check_runs_here(floor_for([program], recorded if recorded is not None else recorded_near(program)), root=root)


def check_outputs(outputs: Iterable[Path], manifest: Path | None, *, root: Path | None = None) -> None:
    """Refuse (RuntimeFloorError) a build whose programs, among ``outputs``, cannot run on the
    system (this box, or the one under ``root``); the packages named come from ``manifest``."""
    recorded = recorded_in(manifest) if manifest is not None else None
    check_runs_here(floor_for(programs_of(outputs), recorded), root=root)


PACKAGES_NAME = "runtime-packages.txt"  # in an install's share/onebit-build: what the system must have


def packages_text(recorded: Mapping[str, Any] | None) -> str | None:
    """The text of ``runtime-packages.txt``: the Debian packages (one a line, with the version
    the build was made against) that give the libraries the programs load; None when unknown. Pure."""
    try:
        floor = Floor.from_doc(recorded) if recorded else None
    except ValueError:
        return None
    if floor is None or not floor.packages:
        return None
    lines = [f"{p['name']} {p.get('version', '')}".rstrip() for p in sorted(floor.packages, key=lambda p: p["name"])]
    glibc = floor.highest_of("GLIBC")
    head = ("# The system packages llama-server loads libraries from (name, version built against)."
            + (f" It needs {glibc} or later." if glibc else "")
            + "\n# Install them with: apt-get install " + " ".join(p.split()[0] for p in lines) + "\n")
    return head + "\n".join(lines) + "\n"


def write_packages(folder: Path, manifest: Path, outputs: Iterable[Path]) -> Path | None:
    """``runtime-packages.txt`` of the build ``manifest`` describes (a manifest older than the
    record: read from its ``outputs``, with this box's packages), written into ``folder``."""
    from onebit_build.core.fsutil import atomic_write_text

    text = packages_text(recorded_in(manifest) or floor_for(programs_of(outputs)).to_doc())
    if text is None:
        return None
    atomic_write_text(folder / PACKAGES_NAME, text)
    return folder / PACKAGES_NAME
