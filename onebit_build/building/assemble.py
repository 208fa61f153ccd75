"""Assemble stage: make a component's install prefix out of its build dir.

Some projects cannot be installed with ``cmake --install`` (the HRX runtime's install and
export rules are switched off by its patch series), yet a later component needs a CMake
package to ``find_package``. The recipe's ``assemble:`` rules say what goes where:

- ``install: true`` runs ``cmake --install`` into the prefix first;
- ``copy`` rules copy what a glob matches in the build dir (or the patched source tree)
  into a folder of the prefix, keeping symbolic links as links;
- ``archive`` rules pack object files into a static archive with the recipe's archiver;
- ``configure`` rules write a template kept next to the recipes, filling ``@PREFIX@``,
  ``@COMPONENT@``, ``@SOURCE_DIR@`` and ``@BUILD_DIR@``;
- then every shared library that the libraries in ``lib/`` load from the build folder
  (DT_NEEDED through their RUNPATH) is copied into ``lib/`` too.

The prefix lives inside the build dir (``onebit-prefix``), so a new configuration gets a
new prefix; its digest is one of the build's outputs, so the build stamp covers it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from onebit_build.spec.assemble_spec import AssembleSpec
from onebit_build.core.errors import BuildError, CommandError
from onebit_build.core.proc import run

PREFIX_DIR = "onebit-prefix"
FIELDS = ("PREFIX", "COMPONENT", "SOURCE_DIR", "BUILD_DIR")


@dataclass(frozen=True, kw_only=True)
class AssemblePlan:
    """Everything the assembly depends on, resolved: the rules, the template texts and
    the archiver. Its digest decides whether an existing prefix is still right."""

    component: str
    spec: AssembleSpec
    templates: tuple[tuple[str, str], ...] = ()  # (template name, its text)
    ar: str | None = None  # archiver for 'archive' rules (the component's CMAKE_AR)

    @property
    def digest(self) -> str:
        doc = {
            "component": self.component,
            "install": self.spec.install,
            "copy": [[r.origin, r.glob, r.to, r.optional] for r in self.spec.copy],
            "archive": [[r.origin, r.glob, r.to] for r in self.spec.archive],
            "configure": [[r.template, r.to] for r in self.spec.configure],
            "templates": [[n, hashlib.sha256(t.encode()).hexdigest()] for n, t in self.templates],
            "ar": self.ar,
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def make_plan(component: str, spec: AssembleSpec, *, recipes_dir: Path, ar: str | None) -> AssemblePlan:
    """Read the templates a spec names (they are part of its identity)."""
    templates = tuple((r.template, (recipes_dir / r.template).read_text(encoding="utf-8")) for r in spec.configure)
    return AssemblePlan(component=component, spec=spec, templates=templates, ar=ar)


def prefix_path(build_dir: Path) -> Path:
    return build_dir / PREFIX_DIR


# --------------------------------------------------------------------------- pure decisions


def fill_template(text: str, values: dict[str, str]) -> str:
    """Replace ``@NAME@`` for the known names only; anything else stays as written."""
    for name in FIELDS:
        if name in values:
            text = text.replace(f"@{name}@", values[name])
    return text


def matches(base: Path, pattern: str) -> list[Path]:
    """What ``pattern`` matches under ``base``, sorted; never anything outside it."""
    found = sorted(base.glob(pattern))
    root = base.resolve()
    out = []
    for p in found:
        try:
            p.parent.resolve().relative_to(root)
        except ValueError:
            continue
        out.append(p)
    return out


# --------------------------------------------------------------------------- the stage


def _copy_one(src: Path, dest_dir: Path, taken: dict[Path, str], rule: str) -> None:
    dest = dest_dir / src.name
    if dest in taken:
        raise BuildError(f"assemble: {rule} would overwrite {dest.name} already placed by {taken[dest]}",
                         hint="make the globs of the copy rules disjoint")
    taken[dest] = rule
    dest_dir.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        # Shared-library name links (libx.so -> libx.so.1) stay links, relative as built.
        os.symlink(os.readlink(src), dest)
    elif src.is_dir():
        shutil.copytree(src, dest, symlinks=True)
    else:
        shutil.copyfile(src, dest)
        shutil.copymode(src, dest)


def bundle_libraries(lib: Path, build_dir: Path) -> list[Path]:
    """Every shared library the prefix's libraries load from the build folder (through their
    RUNPATH, e.g. each IREE and Loom library of a BUILD_SHARED_LIBS=ON build), copied into
    ``lib`` beside them: the prefix then holds, and its digest covers, all it loads."""
    # Imported here: reading ELF files is needed only once a prefix is assembled, and the
    # command line starts faster without pyelftools.
    from onebit_build.building.elfdeps import build_tree_libraries, copy_libraries, read_elf

    if not lib.is_dir():
        return []
    elves = [p for p in sorted(lib.iterdir()) if p.is_file() and not p.is_symlink() and read_elf(p) is not None]
    return copy_libraries(build_tree_libraries(elves, build_dir), lib)


def _cmake_install(plan: AssemblePlan, cmake: Path | None, *, build_dir: Path, prefix: Path, log: Path | None) -> None:
    if cmake is None:
        raise BuildError("assemble: install needs cmake", hint="install CMake (pip install cmake)")
    run([cmake, "--install", build_dir, "--prefix", prefix], log=log, what=f"cmake --install of {plan.component}",
        hint=f"does {plan.component} have install rules? Otherwise use copy rules in 'assemble:'")


def assemble(plan: AssemblePlan, *, build_dir: Path, source_dir: Path, log: Path | None,
             cmake: Path | None = None) -> Path:
    """(Re)make the prefix of ``build_dir`` from scratch and return its path."""
    prefix = prefix_path(build_dir)
    if prefix.exists() or prefix.is_symlink():
        shutil.rmtree(prefix)
    prefix.mkdir(parents=True)
    bases = {"build": build_dir, "source": source_dir}
    try:
        if plan.spec.install:
            _cmake_install(plan, cmake, build_dir=build_dir, prefix=prefix, log=log)
        taken: dict[Path, str] = {}
        for i, rule in enumerate(plan.spec.copy):
            name = f"copy[{i}] ({rule.origin}: {rule.glob})"
            found = matches(bases[rule.origin], rule.glob)
            if not found and not rule.optional:
                raise BuildError(f"assemble {plan.component}: {name} matched nothing in {bases[rule.origin]}",
                                 hint="check the glob against the targets the recipe builds (see the build log)")
            for src in found:
                _copy_one(src, prefix / rule.to, taken, name)
        for i, rule in enumerate(plan.spec.archive):
            objects = [p for p in matches(bases[rule.origin], rule.glob) if p.is_file()]
            if not objects:
                raise BuildError(f"assemble {plan.component}: archive[{i}] ({rule.glob}) matched no object file",
                                 hint="check that the object-library target is among the recipe's targets")
            if not plan.ar:
                raise BuildError(f"assemble {plan.component}: no archiver for {rule.to}",
                                 hint="set CMAKE_AR in the component's defines (or install binutils for 'ar')")
            out = prefix / rule.to
            out.parent.mkdir(parents=True, exist_ok=True)
            # D: zero timestamps and ids, so the same objects give the same archive bytes.
            run([plan.ar, "rcsD", out, *objects], log=log, what=f"{Path(plan.ar).name} for {rule.to}")
        bundle_libraries(prefix / "lib", build_dir)
        values = {"PREFIX": str(prefix), "COMPONENT": plan.component, "SOURCE_DIR": str(source_dir),
                  "BUILD_DIR": str(build_dir)}
        texts = dict(plan.templates)
        for rule in plan.spec.configure:
            out = prefix / rule.to
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(fill_template(texts[rule.template], values), encoding="utf-8")
    except CommandError as exc:
        shutil.rmtree(prefix, ignore_errors=True)
        raise BuildError(str(exc.message), hint=exc.hint or f"full log {log}", detail=exc.tail) from None
    except BaseException:
        shutil.rmtree(prefix, ignore_errors=True)
        raise
    return prefix
