"""The outputs a build declares: each file (or folder, digested as a tree) in the build
folder with its sha256, never a path that leads out of the folder."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from onebit_build.spec.recipe import Component
from onebit_build.core.errors import BuildError, ConfigError
from onebit_build.core.fsutil import sha256_file
from onebit_build.core.names import relative_inside


@dataclass(frozen=True, kw_only=True)
class Output:
    name: str
    path: Path
    sha256: str
    size: int



def declared_outputs(component: Component, build_dir: Path) -> tuple[Output, ...]:
    """The declared outputs. A value with a ``*`` is a glob: each regular file it matches
    (symbolic links are skipped: they name a file that is already listed) is one output.
    Every output must lie inside the build folder once symbolic links are followed."""
    outs = []
    for name, rel in component.outputs:
        if not relative_inside(rel):  # the recipe was checked at load; a Component made elsewhere may not be
            raise ConfigError(f"{component.name}: output {name} ({rel}) leaves the build folder",
                              hint="fix 'outputs' in the recipe")
        check = inside(component, build_dir)
        if "*" in rel:
            matches = sorted(p for p in build_dir.glob(rel) if p.is_file() and not p.is_symlink())
            if not matches:
                raise BuildError(f"{component.name}: output {name} ({rel}) matched no file in {build_dir}",
                                 hint="check 'outputs' in the recipe")
            outs += [Output(name=p.name, path=check(p), sha256=sha256_file(p), size=p.stat().st_size) for p in matches]
            continue
        p = build_dir / rel
        if not p.exists():
            raise BuildError(f"{component.name}: expected output {name} at {p} is missing",
                             hint="check 'outputs' in the recipe against the targets built")
        for inner in (p, *(p.rglob("*") if p.is_dir() else ())):
            check(inner)
        outs.append(Output(name=name, path=p, sha256=sha256_file(p) if p.is_file() else tree_digest(p),
                           size=p.stat().st_size if p.is_file() else 0))
    return tuple(outs)


def inside(component: Component, build_dir: Path):
    """A check that an output path, its symbolic links followed, stays in ``build_dir``."""
    root = build_dir.resolve()

    def check(path: Path) -> Path:
        real = path.resolve()
        if real != root and root not in real.parents:
            raise BuildError(f"{component.name}: output {path} leads outside the build folder (to {real})",
                             hint="the build linked it out of its folder; fix the recipe's outputs or the build")
        return path

    return check


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(f"{p.relative_to(root)}\0{sha256_file(p)}\n".encode())
    return h.hexdigest()
