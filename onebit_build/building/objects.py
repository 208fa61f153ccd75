"""The object files of a build folder: their digests (recorded in the manifest and in the
committed references) and a compile of one of them again without the compiler cache, which is
how a poisoned cache entry is told apart from a toolchain that drifted."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from onebit_build.core import proc
from onebit_build.core.fsutil import sha256_file

OBJECT_SUFFIXES = (".o", ".obj")
COMPILE_COMMANDS = "compile_commands.json"
RECOMPILE_TIMEOUT_S = 1800


def object_digests(build_dir: Path) -> dict[str, str]:
    """The sha256 of every object a target compiled (``<target>.dir/`` under a
    ``CMakeFiles`` folder), keyed by its path relative to the build folder. CMake's own
    compiler-identification objects are left out: they are not part of any output."""
    out: dict[str, str] = {}
    if not build_dir.is_dir():
        return out
    for path in build_dir.rglob("*"):
        if path.suffix not in OBJECT_SUFFIXES or path.is_symlink() or not path.is_file():
            continue
        rel = path.relative_to(build_dir)
        if not any(part.endswith(".dir") for part in rel.parts[:-1]) or "CMakeFiles" not in rel.parts:
            continue
        out[rel.as_posix()] = sha256_file(path)
    return dict(sorted(out.items()))


def differing_objects(found: Mapping[str, str], expected: Mapping[str, str]) -> list[str]:
    """Objects both record whose bytes differ, in order. Pure."""
    return [name for name in sorted(expected) if name in found and found[name] != expected[name]]


@dataclass(frozen=True, kw_only=True)
class Recompiled:
    name: str  # the object, relative to the build folder
    cached: str  # sha256 of the object the build holds (what the cache served)
    expected: str  # sha256 the reference records
    fresh: str | None  # sha256 of the same compile run again without any launcher; None if it failed
    detail: str = ""  # why the compile could not be run again

    @property
    def verdict(self) -> str:
        """``poisoned`` (the cache served other bytes than the compiler makes), ``drift``
        (the compiler here makes these bytes: the toolchain is not the reference's), or
        ``unknown``. Pure."""
        if self.fresh is None:
            return "unknown"
        if self.fresh == self.expected and self.cached != self.expected:
            return "poisoned"
        if self.fresh == self.cached:
            return "drift"
        return "unknown"


def compile_entries(build_dir: Path, ninja: Path | None = None) -> list:
    """The build's compilation database: CMake's ``compile_commands.json`` where the project
    exports one, else what Ninja knows of the build folder (``ninja -t compdb``)."""
    try:
        entries = json.loads((build_dir / COMPILE_COMMANDS).read_text())
    except (OSError, ValueError):
        entries = None
        if ninja is not None and (build_dir / "build.ninja").is_file():
            res = proc.capture([ninja, "-C", build_dir, "-t", "compdb"], timeout=120)
            try:
                entries = json.loads(res.stdout) if res.ok else None
            except ValueError:
                entries = None
    return entries if isinstance(entries, list) else []


def compile_entry(build_dir: Path, name: str, ninja: Path | None = None) -> dict | None:
    """The compile command of one object."""
    for e in compile_entries(build_dir, ninja):
        if not isinstance(e, dict) or "output" not in e:
            continue
        target = Path(str(e.get("directory", build_dir))) / str(e["output"])
        try:
            if target.resolve() == (build_dir / name).resolve():
                return e
        except (OSError, RuntimeError):
            continue
    return None


def uncached_argv(entry: Mapping[str, object], launchers: tuple[str, ...], out: Path) -> list[str]:
    """The entry's compile as an argument list with any compiler launcher dropped from its
    front and its object (and dependency file) written to ``out`` instead. Pure."""
    argv = list(entry["arguments"]) if isinstance(entry.get("arguments"), list) else shlex.split(str(entry["command"]))
    names = {Path(launcher).name for launcher in launchers if launcher}
    while argv and (argv[0] in launchers or Path(argv[0]).name in names):
        argv.pop(0)
    result = []
    skip_next = None
    for arg in argv:
        if skip_next is not None:
            result.append(str(out) if skip_next == "-o" else str(out) + ".d")
            skip_next = None
            continue
        if arg in ("-o", "-MF"):
            skip_next = arg
        result.append(arg)
    return [str(a) for a in result]


def recompile(build_dir: Path, name: str, *, cached: str, expected: str, launchers: tuple[str, ...],
              ninja: Path | None = None, env: Mapping[str, str] | None = None, keep: Path | None = None) -> Recompiled:
    """Compile ``name`` again exactly as the build did, with no compiler cache in the way, into
    a temporary file, and say how its bytes compare; with ``keep``, that file is copied there."""
    entry = compile_entry(build_dir, name, ninja)
    if entry is None:
        return Recompiled(name=name, cached=cached, expected=expected, fresh=None,
                          detail=f"no compile command for it in {COMPILE_COMMANDS} or Ninja's database")
    with tempfile.TemporaryDirectory(prefix="onebit-recompile-") as tmp:
        out = Path(tmp) / Path(name).name
        argv = uncached_argv(entry, launchers, out)
        res = proc.capture(argv, cwd=Path(str(entry.get("directory", build_dir))), env=env, timeout=RECOMPILE_TIMEOUT_S)
        if not res.ok or not out.is_file():
            tail = (res.stderr or res.stdout or "").strip().splitlines()[-1:] or ["no output"]
            return Recompiled(name=name, cached=cached, expected=expected, fresh=None,
                              detail=f"the compile failed ({tail[0][:200]})")
        if keep is not None:
            keep.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out, keep)
        return Recompiled(name=name, cached=cached, expected=expected, fresh=sha256_file(out))


# --------------------------------------------------------------------------- cross-file hits


def file_symbol(obj: Path) -> str | None:
    """The source file name an ELF object records (its first STT_FILE symbol); None when it
    has none or is no ELF object."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    try:
        with obj.open("rb") as f:
            elf = ELFFile(f)
            symtab = elf.get_section_by_name(".symtab")
            if not isinstance(symtab, SymbolTableSection):
                return None
            for sym in symtab.iter_symbols():
                if sym["st_info"]["type"] == "STT_FILE" and sym.name:
                    return sym.name
    except (OSError, ELFError, ValueError):
        return None
    return None


def misnamed_objects(build_dir: Path, ninja: Path | None = None) -> list[tuple[str, str, str]]:
    """Objects that record another source file's name than the one they were compiled from:
    what a compiler cache serves when two sources preprocess to the same text (sccache keys
    on that text, and the object keeps the name of the file it was first made from). Each as
    (object relative to the build folder, the source's name, the name it records)."""
    out = []
    for e in compile_entries(build_dir, ninja):
        if not isinstance(e, dict) or "output" not in e or "file" not in e:
            continue
        # Ninja's database lists the link steps too (an object as their "file"): compiles only.
        if Path(str(e["output"])).suffix not in OBJECT_SUFFIXES or Path(str(e["file"])).suffix in OBJECT_SUFFIXES:
            continue
        obj = Path(str(e.get("directory", build_dir))) / str(e["output"])
        source = Path(str(e["file"])).name
        found = file_symbol(obj) if obj.is_file() else None
        if found is not None and found != source:
            try:
                rel = obj.resolve().relative_to(build_dir.resolve()).as_posix()
            except ValueError:
                continue
            out.append((rel, source, found))
    return out


def compile_in_place(build_dir: Path, name: str, *, launchers: tuple[str, ...], ninja: Path | None = None,
                     env: Mapping[str, str] | None = None) -> str | None:
    """Compile ``name`` again as the build did, without any launcher, and put the new object
    in its place (atomically); None when that worked, else why not."""
    entry = compile_entry(build_dir, name, ninja)
    if entry is None:
        return f"no compile command for {name}"
    target = build_dir / name
    tmp = target.with_name(f".{target.name}.uncached")
    res = proc.capture(uncached_argv(entry, launchers, tmp), cwd=Path(str(entry.get("directory", build_dir))),
                       env=env, timeout=RECOMPILE_TIMEOUT_S)
    if not res.ok or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}.d").unlink(missing_ok=True)
        return f"the compile of {name} failed"
    Path(f"{tmp}.d").unlink(missing_ok=True)
    # Ninja must not compile it again: it keeps the old object's time (its deps log records it).
    times = target.stat()
    tmp.replace(target)
    os.utime(target, ns=(times.st_atime_ns, times.st_mtime_ns))
    return None


def dependents(build_dir: Path, name: str, ninja: Path) -> list[Path]:
    """What Ninja builds from an object (``ninja -t query``: its outputs), inside the build folder."""
    res = proc.capture([ninja, "-C", build_dir, "-t", "query", name], timeout=60)
    out, in_outputs = [], False
    for line in res.stdout.splitlines() if res.ok else []:
        if line.strip() == "outputs:":
            in_outputs = True
        elif in_outputs and line.startswith("    "):
            path = (build_dir / line.strip()).resolve()
            if path.is_relative_to(build_dir.resolve()):
                out.append(path)
        elif in_outputs:
            in_outputs = False
    return out


def repair_cross_file_hits(build_dir: Path, *, ninja: Path | None, env: Mapping[str, str] | None = None,
                           launchers: tuple[str, ...] = ("sccache", "ccache")) -> tuple[list[str], list[str]]:
    """Every object the cache served from another source's entry, compiled again without the
    cache in its place, and what Ninja links from it removed (the next build links it again).
    Returns (the objects replaced, what could not be)."""
    names = [name for name, _source, _found in misnamed_objects(build_dir, ninja)]
    return replace_objects(build_dir, names, ninja=ninja, env=env, launchers=launchers)


def replace_objects(build_dir: Path, names: list[str], *, ninja: Path | None, env: Mapping[str, str] | None = None,
                    launchers: tuple[str, ...] = ("sccache", "ccache")) -> tuple[list[str], list[str]]:
    """Each object compiled again without any launcher in its place, and what Ninja links from
    it removed. Returns (the objects replaced, why others could not be)."""
    fixed, failed = [], []
    for name in names:
        why = compile_in_place(build_dir, name, launchers=launchers, ninja=ninja, env=env)
        (failed if why else fixed).append(why or name)
        for made in dependents(build_dir, name, ninja) if ninja and not why else []:
            made.unlink(missing_ok=True)  # linked again from the replaced object
    return fixed, failed
