"""The build manifest: what was built, from what, with what; versioned and written atomically."""

from __future__ import annotations

import platform
import socket
import time
from pathlib import Path
from typing import Any

from onebit_build import __version__
from onebit_build.building.artifacts import ArtifactSet
from onebit_build.building.builder import BuildResult
from onebit_build.core.config import Recipe
from onebit_build.building.fetch import FetchResult
from onebit_build.core.fsutil import read_state, sha256_file, write_state
from onebit_build.building.patch import PreparedTree

KIND = "onebit-build/build-manifest"
SCHEMA = 1


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
    return info


def make_manifest(recipe: Recipe, fetched: dict[str, FetchResult], trees: dict[str, PreparedTree], builds: list[BuildResult], artifacts: dict[str, list[ArtifactSet]] | None = None, extra_tools: dict[str, str] | None = None,
                  project: dict[str, str] | None = None) -> dict[str, Any]:
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
        })
    toolchain = builds[-1].toolchain.as_dict() if builds else {}
    for sets in (artifacts or {}).values():
        for a in sets:
            toolchain.update({k: v for k, v in a.facts.items() if k in ("glslc", "nvcc", "loom_link")})
    if extra_tools:
        toolchain.update(extra_tools)
    return {
        "tool": {"name": "onebit-build", "version": __version__},
        **(project or {}),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "recipe": {"name": recipe.name, "path": str(recipe.path), "sha256": sha256_file(recipe.path), "backends": list(recipe.backends)},
        "host": host_info(),
        "toolchain": toolchain,
        "sources": sources,
        "components": comps,
    }


def write_manifest(path: Path, doc: dict[str, Any]) -> None:
    write_state(path, KIND, SCHEMA, doc)


def read_manifest(path: Path) -> dict[str, Any]:
    return read_state(path, KIND, SCHEMA)
