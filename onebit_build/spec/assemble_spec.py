"""A component's ``assemble`` section: how its install prefix is made (copy, archive and
template rules), validated at load like the rest of the recipe."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from onebit_build.spec.yamlnode import Node


@dataclass(frozen=True, kw_only=True)
class CopyRule:
    """Copy what ``glob`` matches under the build (or source) dir into ``to`` in the prefix."""

    origin: str  # "build" or "source"
    glob: str
    to: str
    optional: bool = False  # matching nothing is then not an error


@dataclass(frozen=True, kw_only=True)
class ArchiveRule:
    """Pack the object files ``glob`` matches into the static archive ``to`` (with CMAKE_AR)."""

    origin: str
    glob: str
    to: str


@dataclass(frozen=True, kw_only=True)
class TemplateRule:
    """Write ``template`` (relative to the recipes folder) to ``to``, filling @NAME@ fields."""

    template: str
    to: str


@dataclass(frozen=True, kw_only=True)
class AssembleSpec:
    """How a component's install prefix is made; the prefix becomes the field ``prefix``."""

    install: bool = False  # run 'cmake --install' into the prefix first
    copy: tuple[CopyRule, ...] = ()
    archive: tuple[ArchiveRule, ...] = ()
    configure: tuple[TemplateRule, ...] = ()


def _relative(node: Node, key: str, value: str) -> str:
    if not value or value.startswith("/") or ".." in Path(value).parts:
        node.fail(f"{value!r} must be a relative path without '..'", "write a path inside the folder", key=key)
    return value


def load_assemble(node: Node, recipes_dir: Path) -> AssembleSpec | None:
    anode = node.child("assemble", required=False)
    if anode is None:
        return None
    anode.only({"install", "copy", "archive", "configure"})

    def rules(key: str, fields: set[str]) -> list[Node]:
        out = []
        for i, raw in enumerate(anode.get(key, list, required=False, default=[])):
            rnode = Node(anode.file, anode.where(f"{key}[{i}]"), raw)
            rnode.only(fields)
            out.append(rnode)
        return out

    def origin(rnode: Node) -> str:
        value = rnode.get("from", str, fix="say where to look: build or source")
        if value not in ("build", "source"):
            rnode.fail(f"unknown origin {value!r}",
                       "use build (the build dir) or source (the patched tree)", key="from")
        return value

    copy = tuple(
        CopyRule(origin=origin(r), glob=_relative(r, "glob", r.get("glob", str)),
                 to=_relative(r, "to", r.get("to", str)),
                 optional=r.get("optional", bool, required=False, default=False))
        for r in rules("copy", {"from", "glob", "to", "optional"})
    )
    archive = tuple(
        ArchiveRule(origin=origin(r), glob=_relative(r, "glob", r.get("glob", str)),
                    to=_relative(r, "to", r.get("to", str)))
        for r in rules("archive", {"from", "glob", "to"})
    )
    configure = []
    for r in rules("configure", {"template", "to"}):
        template = _relative(r, "template", r.get("template", str))
        if not (recipes_dir / template).is_file():
            r.fail(f"template {template} not found next to the recipe",
                   f"create {recipes_dir / template} or fix the path", key="template")
        configure.append(TemplateRule(template=template, to=_relative(r, "to", r.get("to", str))))
    spec = AssembleSpec(install=anode.get("install", bool, required=False, default=False), copy=copy, archive=archive,
                        configure=tuple(configure))
    if not (spec.install or spec.copy or spec.archive or spec.configure):
        anode.fail("nothing to assemble", "set install: true or give copy/archive/configure rules")
    return spec
