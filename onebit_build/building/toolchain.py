"""The toolchain a recipe names, as paths on this machine.

- :func:`resolve_toolchain` turns a recipe's ``toolchain:`` section into paths (root, the
  archiver, the HSA runtime library), honouring ``--toolchain-root`` and the recipe's
  environment variable;
- :func:`component_fields` gives the ``${toolchain.*}`` reference table a build starts with;
- :func:`runtime_env` gives the smoke stage's environment with ``${toolchain.*}`` filled.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from onebit_build.building.builder import resolve_refs
from onebit_build.spec.interpolate import INTERPOLATION_RE
from onebit_build.spec.recipe import Recipe
from onebit_build.spec.toolchain_spec import ToolchainSpec
from onebit_build.core.errors import ToolMissingError


@dataclass(frozen=True, kw_only=True)
class ToolchainSettings:
    root: Path
    root_from: str  # "recipe", "$NAME" or "--toolchain-root"
    ar: str | None
    libhsa: str | None
    spec: ToolchainSpec

    def fields(self) -> dict[str, str]:
        """Values for ``${toolchain.FIELD}``; only the ones that were found."""
        out = {"root": str(self.root)}
        if self.ar:
            out["ar"] = self.ar
        if self.libhsa:
            out["libhsa"] = self.libhsa
        return out

    def require(self, name: str, where: str) -> None:
        if name in self.fields():
            return
        if name == "ar":
            tried = ", ".join(self.spec.ar) or "(no candidates)"
            raise ToolMissingError(
                f"{where}: no archiver for ${{toolchain.ar}} (tried {tried} under {self.root} and on PATH)",
                hint="install binutils (Debian: apt-get install binutils) or LLVM's llvm-ar",
            )
        if name == "libhsa":
            raise ToolMissingError(
                f"{where}: no HSA runtime under {self.root} (looked for {', '.join(self.spec.libhsa) or 'nothing'})",
                hint="install TheRock there, point --toolchain-root at it, or set IREE_HAL_AMDGPU_LIBHSA_PATH",
            )


def find_ar(root: Path, candidates: tuple[str, ...]) -> str | None:
    """The first candidate that exists: a path relative to ``root`` (has a '/') or a program on PATH."""
    for cand in candidates:
        if "/" in cand:
            p = root / cand
            if p.is_file() and os.access(p, os.X_OK):
                return str(p)
        else:
            found = shutil.which(cand)
            if found:
                return found
    return None


def find_libhsa(root: Path, patterns: tuple[str, ...]) -> str | None:
    for pattern in patterns:
        for p in sorted(root.glob(pattern)):
            if p.is_file():
                return str(p)
    return None


def resolve_toolchain(spec: ToolchainSpec, *, override: str | None = None,
                      environ: Mapping[str, str] | None = None) -> ToolchainSettings:
    env = os.environ if environ is None else environ
    if override:
        root, how = Path(override), "--toolchain-root"
    elif env.get(spec.root_env):
        root, how = Path(env[spec.root_env]), f"${spec.root_env}"
    else:
        root, how = Path(spec.root), "recipe"
    return ToolchainSettings(root=root, root_from=how, ar=find_ar(root, spec.ar), libhsa=find_libhsa(root, spec.libhsa),
                             spec=spec)


def toolchain_refs(values: tuple[tuple[str, str], ...]) -> set[str]:
    out = set()
    for _, v in values:
        for ref in INTERPOLATION_RE.findall(v):
            parts = ref.split(".")
            if parts[0] == "toolchain" and len(parts) == 2:
                out.add(parts[1])
    return out


def component_fields(recipe: Recipe, toolchain: ToolchainSettings | None) -> dict[str, dict[str, str]]:
    """The reference table a build starts with: ``toolchain`` when the recipe has one.
    Raises ToolMissingError naming the missing piece when a component needs it."""
    if toolchain is None:
        return {}
    for comp in recipe.components:
        for name in sorted(toolchain_refs((*comp.defines, *comp.env))):
            toolchain.require(name, f"component {comp.name}")
    return {"toolchain": toolchain.fields()}


def join_lists(value: str, separator: str | None) -> str:
    """A list written with the recipe's separator becomes a CMake list (';')."""
    return value.replace(separator, ";") if separator else value


def runtime_env(recipe: Recipe, toolchain: ToolchainSettings | None,
                environ: Mapping[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    """The smoke stage's environment. A variable the user already set wins ("given");
    otherwise ``${toolchain.*}`` is filled from the toolchain."""
    env = os.environ if environ is None else environ
    out = []
    for key, value in recipe.smoke.env:
        if env.get(key):
            out.append((key, env[key]))
            continue
        refs = toolchain_refs(((key, value),))
        if refs:
            if toolchain is None:
                raise ToolMissingError(f"smoke.env.{key} needs a toolchain",
                                       hint="add a toolchain section to the recipe")
            for name in sorted(refs):
                toolchain.require(name, f"smoke.env.{key}")
            value = resolve_refs(value, pins={}, components={"toolchain": toolchain.fields()})
        out.append((key, value))
    return tuple(out)
