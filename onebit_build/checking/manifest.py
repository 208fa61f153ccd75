"""The build manifest: what was built, from what, with what; versioned and written atomically.

:class:`Manifest` is the typed, frozen view of the document (``from_doc`` / ``to_doc``);
:func:`make_manifest` writes the document of a finished build and :func:`load_latest`
finds the latest one of a recipe in a workspace.
"""

from __future__ import annotations

import platform
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from onebit_build import __version__
from onebit_build.checking.artifacts import TOOL_FACTS, ArtifactSet
from onebit_build.building.builder import BuildResult
from onebit_build.sources.fetch import FetchResult
from onebit_build.building.objects import object_digests
from onebit_build.sources.patch import PreparedTree
from onebit_build.spec.recipe import Recipe
from onebit_build.core.errors import NotAvailableError, VerifyError
from onebit_build.core.fsutil import StateError, read_state, sha256_file, write_state
from onebit_build.core.proc import version_line
from onebit_build.core.workspace import Workspace

KIND = "onebit-build/build-manifest"
SCHEMA = 1
MANIFEST_NAME = "build-manifest.json"  # in each build folder: the build it holds
LATEST_DIR = "manifests"  # in the workspace: <recipe>.json, the manifest of its latest build
SERVER_OUTPUT = "llama-server"  # the output that is the server, in every recipe that builds one


# --------------------------------------------------------------------------- the typed view


@dataclass(frozen=True, kw_only=True)
class OutputRecord:
    name: str
    path: str
    sha256: str
    size: int


@dataclass(frozen=True, kw_only=True)
class SourceRecord:
    name: str
    commit: str
    url: str = ""
    resolved_from: str | None = None
    mirror_used: str | None = None
    archive_sha256: str | None = None
    tree: str = ""
    patched_head: str | None = None
    patch_digest: str | None = None
    patches: tuple[tuple[str, str], ...] = ()  # (name, sha256)


@dataclass(frozen=True, kw_only=True)
class ComponentRecord:
    name: str
    source: str = ""
    build_dir: str = ""
    key: str = ""
    build_type: str = ""
    targets: tuple[str, ...] = ()
    defines: Mapping[str, str] = field(default_factory=dict)
    configure_argv: tuple[str, ...] = ()
    build_argv: tuple[str, ...] = ()
    toolchain: Mapping[str, Any] = field(default_factory=dict)
    outputs: tuple[OutputRecord, ...] = ()
    artifacts: tuple[ArtifactSet, ...] = ()
    # The folders mapped out of the objects ({"old": path, "new": "."}) and what the compiler
    # cache did for this build (cache.session.CacheReport.to_dict()); empty in older manifests.
    prefix_maps: tuple[Mapping[str, str], ...] = ()
    compiler_cache: Mapping[str, Any] = field(default_factory=dict)
    # sha256 of every object the build compiled, by its path in the build folder (objects.py);
    # empty in older manifests.
    objects: Mapping[str, str] = field(default_factory=dict)

    def output(self, name: str) -> OutputRecord | None:
        return next((o for o in self.outputs if o.name == name), None)


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """One build manifest. Documents of older versions may lack keys; they read as empty."""

    recipe: str
    recipe_path: str = ""
    recipe_sha256: str = ""
    backends: tuple[str, ...] = ()
    tool: Mapping[str, str] = field(default_factory=dict)
    created: str | None = None
    host: Mapping[str, str] = field(default_factory=dict)
    toolchain: Mapping[str, Any] = field(default_factory=dict)
    sources: tuple[SourceRecord, ...] = ()
    components: tuple[ComponentRecord, ...] = ()
    project_root: str | None = None  # absent in manifests written before it was recorded
    data_from: str | None = None
    started: str | None = None  # UTC, when the build part began (absent in older manifests)
    # The tool binaries the build ran, each {name, path, sha256, purl, components} (evidence.tools).
    toolchain_files: tuple[Mapping[str, Any], ...] = ()
    # What the programs need from the system that runs them (evidence.floor.Floor.to_doc); empty in older manifests.
    runtime_floor: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any], where: str = "manifest") -> "Manifest":
        """The manifest of a document (as :func:`read_manifest` returns it). Raises
        StateError when its shape is wrong, VerifyError for a malformed artifact set."""
        try:
            return _manifest_from_doc(doc, where)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StateError(f"{where}: not a build manifest ({type(exc).__name__}: {exc})") from None

    @classmethod
    def of(cls, manifest: "Manifest | Mapping[str, Any]") -> "Manifest":
        """``manifest`` itself, or the manifest of a document."""
        return manifest if isinstance(manifest, Manifest) else cls.from_doc(manifest)

    def to_doc(self) -> dict[str, Any]:
        """The document, in the order and form :func:`make_manifest` writes it."""
        project = {k: v for k, v in (("project_root", self.project_root), ("data_from", self.data_from))
                   if v is not None}
        times = {"started": self.started} if self.started else {}
        return {
            "tool": dict(self.tool),
            **project,
            **times,
            "created": self.created,
            "recipe": {"name": self.recipe, "path": self.recipe_path, "sha256": self.recipe_sha256,
                       "backends": list(self.backends)},
            "host": dict(self.host),
            "toolchain": dict(self.toolchain),
            **({"toolchain_files": [dict(t) for t in self.toolchain_files]} if self.toolchain_files else {}),
            "sources": [_source_doc(s) for s in self.sources],
            "components": [_component_doc(c) for c in self.components],
            **({"runtime_floor": dict(self.runtime_floor)} if self.runtime_floor else {}),
        }

    def component(self, name: str) -> ComponentRecord | None:
        return next((c for c in self.components if c.name == name), None)

    def output(self, name: str) -> OutputRecord | None:
        """The first output called ``name`` (e.g. ``llama-server``) of any component."""
        return next((o for c in self.components for o in c.outputs if o.name == name), None)

    def source_commit(self, source: str) -> str:
        """The commit the build used of ``source``; KeyError when the manifest has none."""
        for s in self.sources:
            if s.name == source:
                return s.commit
        raise KeyError(source)

    def artifact_sets(self) -> dict[tuple[str, str], ArtifactSet]:
        """Every kernel-artifact set, keyed by (component, kind)."""
        return {(c.name, a.kind): a for c in self.components for a in c.artifacts}


def _manifest_from_doc(doc: Mapping[str, Any], where: str) -> Manifest:
    recipe = doc.get("recipe") or {}
    return Manifest(
        recipe=str(recipe.get("name", "")),
        recipe_path=str(recipe.get("path", "")),
        recipe_sha256=str(recipe.get("sha256", "")),
        backends=tuple(recipe.get("backends", ())),
        tool=dict(doc.get("tool", {})),
        created=doc.get("created"),
        host=dict(doc.get("host", {})),
        toolchain=dict(doc.get("toolchain", {})),
        sources=tuple(_source_from_doc(s) for s in doc.get("sources", [])),
        components=tuple(_component_from_doc(c, where) for c in doc.get("components", [])),
        project_root=doc.get("project_root"),
        data_from=doc.get("data_from"),
        started=doc.get("started"),
        toolchain_files=tuple(dict(t) for t in doc.get("toolchain_files") or ()),
        runtime_floor=dict(doc.get("runtime_floor") or {}),
    )


def _source_from_doc(s: Mapping[str, Any]) -> SourceRecord:
    return SourceRecord(
        name=str(s["name"]), commit=str(s["commit"]), url=str(s.get("url", "")),
        resolved_from=s.get("resolved_from"), mirror_used=s.get("mirror_used"), archive_sha256=s.get("archive_sha256"),
        tree=str(s.get("tree", "")), patched_head=s.get("patched_head"), patch_digest=s.get("patch_digest"),
        patches=tuple((str(p["name"]), str(p["sha256"])) for p in s.get("patches", [])),
    )


def _source_doc(s: SourceRecord) -> dict[str, Any]:
    return {
        "name": s.name, "url": s.url, "commit": s.commit, "resolved_from": s.resolved_from,
        "mirror_used": s.mirror_used, "archive_sha256": s.archive_sha256,
        "tree": s.tree, "patched_head": s.patched_head, "patch_digest": s.patch_digest,
        "patches": [{"name": n, "sha256": h} for n, h in s.patches],
    }


def _component_from_doc(c: Mapping[str, Any], where: str) -> ComponentRecord:
    name = str(c["name"])
    return ComponentRecord(
        name=name, source=str(c.get("source", "")), build_dir=str(c.get("build_dir") or ""), key=str(c.get("key", "")),
        build_type=str(c.get("build_type", "")), targets=tuple(c.get("targets", ())),
        defines=dict(c.get("defines", {})), configure_argv=tuple(c.get("configure_argv", ())),
        build_argv=tuple(c.get("build_argv", ())), toolchain=dict(c.get("toolchain", {})),
        outputs=tuple(OutputRecord(name=str(o["name"]), path=str(o.get("path", "")), sha256=str(o.get("sha256", "")),
                                   size=int(o.get("size", 0))) for o in c.get("outputs", [])),
        artifacts=tuple(ArtifactSet.from_dict(a, f"{where}: component {name}") for a in c.get("artifacts") or []),
        prefix_maps=tuple(dict(m) for m in c.get("prefix_maps") or []),
        compiler_cache=dict(c.get("compiler_cache") or {}),
        objects={str(k): str(v) for k, v in (c.get("objects") or {}).items()},
    )


def _component_doc(c: ComponentRecord) -> dict[str, Any]:
    doc = {
        "name": c.name, "source": c.source, "build_dir": c.build_dir, "key": c.key,
        "build_type": c.build_type, "targets": list(c.targets),
        "defines": dict(c.defines), "configure_argv": list(c.configure_argv),
        "build_argv": list(c.build_argv), "toolchain": dict(c.toolchain),
        "outputs": [{"name": o.name, "path": o.path, "sha256": o.sha256, "size": o.size} for o in c.outputs],
        "artifacts": [a.to_dict() for a in c.artifacts],
    }
    if c.prefix_maps or c.compiler_cache:  # not in manifests written before they were recorded
        doc.update({"prefix_maps": [dict(m) for m in c.prefix_maps], "compiler_cache": dict(c.compiler_cache)})
    if c.objects:
        doc["objects"] = dict(c.objects)
    return doc


# --------------------------------------------------------------------------- writing and finding


def utc_now() -> str:
    """The time now in UTC, as the manifest and the statements write it: ``2026-12-03T10:17:10Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def host_info() -> dict[str, str]:
    info = {
        "hostname": socket.gethostname(),
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "python": platform.python_version(),
    }
    try:
        info["os"] = platform.freedesktop_os_release().get("PRETTY_NAME", "")
    except OSError:
        info["os"] = ""
    lib, version = platform.libc_ver()
    info["libc"] = f"{lib} {version}".strip()
    info["linker"] = version_line("ld") or ""  # binutils: what links every output
    return info


def make_manifest(recipe: Recipe, fetched: dict[str, FetchResult], trees: dict[str, PreparedTree],
                  builds: list[BuildResult], artifacts: dict[str, list[ArtifactSet]] | None = None,
                  extra_tools: dict[str, str] | None = None, project: dict[str, str] | None = None) -> dict[str, Any]:
    """The manifest document. ``project`` names the data the run used (``project_root``,
    ``data_from``: checkout or package); readers of older manifests find no such keys."""
    sources = []
    for name, f in fetched.items():
        t = trees[name]
        sources.append({
            "name": name, "url": f.url, "commit": f.commit, "resolved_from": f.resolved_from,
            "mirror_used": f.mirror_used, "archive_sha256": f.archive_sha256,
            "tree": str(t.path), "patched_head": t.head, "patch_digest": t.patch_digest,
            "patches": [{"name": p.name, "sha256": p.sha256} for p in t.patches],
        })
    comps = []
    for b in builds:
        comp = recipe.component(b.component)
        comps.append({
            "name": b.component, "source": comp.source, "build_dir": str(b.build_dir), "key": b.key,
            "build_type": comp.build_type, "targets": list(comp.targets),
            "defines": dict(b.defines), "configure_argv": list(b.configure_argv),
            "build_argv": list(b.build_argv), "toolchain": b.toolchain.as_dict(),
            "outputs": [{"name": o.name, "path": str(o.path), "sha256": o.sha256, "size": o.size} for o in b.outputs],
            "artifacts": [a.to_dict() for a in (artifacts or {}).get(b.component, [])],
            "prefix_maps": [m.to_dict() for m in b.prefix_maps], "compiler_cache": b.compiler_cache,
            "objects": object_digests(b.build_dir),
        })
    toolchain = builds[-1].toolchain.as_dict() if builds else {}
    for sets in (artifacts or {}).values():
        for a in sets:
            toolchain.update({k: v for k, v in a.facts.items() if k in TOOL_FACTS})
    if extra_tools:
        toolchain.update(extra_tools)
    return {
        "tool": {"name": "onebit-build", "version": __version__},
        **(project or {}),
        "created": utc_now(),
        "recipe": {"name": recipe.name, "path": str(recipe.path), "sha256": sha256_file(recipe.path),
                   "backends": list(recipe.backends)},
        "host": host_info(),
        "toolchain": toolchain,
        "sources": sources,
        "components": comps,
    }


def write_manifest(path: Path, doc: Manifest | dict[str, Any]) -> None:
    write_state(path, KIND, SCHEMA, doc.to_doc() if isinstance(doc, Manifest) else doc)


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest document at ``path`` (FileNotFoundError, or StateError when it is not one)."""
    return read_state(path, KIND, SCHEMA)


def load_manifest(path: Path) -> Manifest:
    """The manifest at ``path`` (FileNotFoundError, or StateError when it is not one)."""
    return Manifest.from_doc(read_manifest(path), str(path))


def latest_path(ws: Workspace, recipe: str) -> Path:
    """Where the manifest of a recipe's latest build in a workspace is kept."""
    return ws.root / LATEST_DIR / f"{recipe}.json"


def load_latest(ws: Workspace, recipe: str) -> Manifest | None:
    """The manifest of the recipe's latest build in the workspace; None when it has none
    (raises StateError when the file is there but is not a manifest)."""
    try:
        return load_manifest(latest_path(ws, recipe))
    except FileNotFoundError:
        return None


def latest_server(ws: Workspace, recipe: str) -> Path:
    """The llama-server of the recipe's latest build in the workspace (nothing is built);
    NotAvailableError naming what is missing and the fix."""
    try:
        man = load_latest(ws, recipe)
    except (StateError, VerifyError) as exc:
        raise NotAvailableError(f"the manifest of the latest {recipe} build is damaged "
                                f"({latest_path(ws, recipe)}: {exc})",
                                hint=f"run 'onebit-build --recipe {recipe} build' to write it again") from None
    if man is None:
        raise NotAvailableError(f"no build of recipe {recipe} in {ws.root} "
                                f"(no {latest_path(ws, recipe).name} manifest)",
                                hint=f"run 'onebit-build --recipe {recipe} build' first")
    out = man.output(SERVER_OUTPUT)
    if out is None:
        raise NotAvailableError(f"the {recipe} build lists no {SERVER_OUTPUT} output ({latest_path(ws, recipe)})",
                                hint=f"add '{SERVER_OUTPUT}: bin/{SERVER_OUTPUT}' to the recipe's outputs")
    if not Path(out.path).is_file():
        raise NotAvailableError(f"the {recipe} build's {SERVER_OUTPUT} is gone ({out.path})",
                                hint=f"run 'onebit-build --recipe {recipe} build' again")
    return Path(out.path)
