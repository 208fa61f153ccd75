"""The shader cache for one build: where it lives (beside the compiler cache, with the same
backends: a local folder, and the compiler cache's shared store when the shader cache can use
it: Redis, an S3-compatible bucket or WebDAV, see ``shader_remote``), the launcher
written into the build folder and given to CMake as ``Vulkan_GLSLC_EXECUTABLE`` (ggml-vulkan
hands that path to ``vulkan-shaders-gen``, which runs it once per shader variant), and what
it did. The launcher itself is ``glslc.py``.

Like the compiler cache, it is never part of the build key (a hit gives the bytes glslc
gives), it is on exactly when a compiler cache is, and it never fails a build: when it
cannot be set up, the build uses the real glslc and says so in one warning line.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from onebit_build.building.shaders import glslc as launcher_module
from onebit_build.building.shaders import glslc_json as json_module
from onebit_build.building.shaders import glslc_http as http_module
from onebit_build.building.shaders import glslc_redis as redis_module
from onebit_build.building.cache.compiler import Launcher
from onebit_build.building.shaders.shader_remote import Remote, plan_remote, settings_for
from onebit_build.core.errors import ConfigError
from onebit_build.building.cache.session import CacheStats
from onebit_build.core.proc import capture
from onebit_build.core.usercache import cache_home

ENV_DIR = "ONEBIT_SHADER_CACHE_DIR"
FOLDER = "onebit-glslc"  # inside the build folder: the launcher, its settings, its statistics
MODULE = "onebit_glslc"  # the launcher's code there, imported by the program named glslc
DEFINE = "Vulkan_GLSLC_EXECUTABLE"
_ON = ("ON", "1", "TRUE", "YES", "Y")


@dataclass(frozen=True, kw_only=True)
class ShaderCache:
    """The shader cache one build uses (``glslc`` None: off, ``reason`` says why)."""

    glslc: str | None = None
    version: str | None = None
    local: str | None = None
    remote: Remote | None = None
    reason: str = ""
    problem: str | None = None  # why the compiler cache's shared store is not used (a warning)

    @property
    def active(self) -> bool:
        return self.glslc is not None

    def describe(self) -> dict[str, Any]:
        """As the plan, the manifest and the report show it: no secrets. Pure."""
        doc: dict[str, Any] = {"launcher": "glslc-cache" if self.active else "none", "reason": self.reason}
        if self.active:
            doc.update({"glslc": self.glslc, "version": self.version,
                        "backend": self.remote.kind if self.remote else "local",
                        "url": self.remote.public if self.remote else None, "cache_dir": self.local})
        return doc


def wants_shaders(defines: Sequence[tuple[str, str]]) -> bool:
    """Whether the configuration builds ggml's Vulkan backend (its shaders). Pure."""
    return dict(defines).get("GGML_VULKAN", "").strip().upper() in _ON


def default_dir(env: Mapping[str, str]) -> str:
    """``$ONEBIT_SHADER_CACHE_DIR``, else ``onebit-glslc`` in the user's cache folder. Pure."""
    if env.get(ENV_DIR):
        return env[ENV_DIR]
    return str(cache_home(env) / "onebit-glslc")


def plan_shader_cache(launcher: Launcher, *, glslc: str | None, env: Mapping[str, str],
                      version: str | None = None) -> ShaderCache:
    """On with the compiler cache (its shared store where the shader cache can use it, a folder
    of its own), off without one. Pure but for reading AWS credentials."""
    if not launcher.active:
        return ShaderCache(reason="no compiler cache")
    if glslc is None:
        return ShaderCache(reason="glslc not found")
    python = sys.executable
    if not python or any(c.isspace() for c in python):
        return ShaderCache(reason=f"this Python's path {python!r} cannot stand in a script's first line")
    try:
        remote, problem = plan_remote(launcher.backend, env, launcher.url), None
    except ConfigError as exc:
        remote, problem = None, f"shader cache: {exc}; the shaders are cached in the local folder only"
    return ShaderCache(glslc=glslc, version=version, local=default_dir(env), remote=remote, problem=problem,
                       reason=f"with the compiler cache ({launcher.kind})")


def resolve(launcher: Launcher, env: Mapping[str, str] | None = None) -> ShaderCache:
    """:func:`plan_shader_cache` on this machine: glslc found on PATH and its version read."""
    env = dict(os.environ if env is None else env)
    glslc = shutil.which("glslc", path=env.get("PATH"))
    return plan_shader_cache(launcher, glslc=glslc and os.path.realpath(glslc), env=env,
                             version=glslc_version(glslc) if glslc and launcher.active else None)


def glslc_version(glslc: str) -> str | None:
    """glslc's whole ``--version`` text (shaderc, SPIRV-Tools and glslang versions)."""
    done = capture([glslc, "--version"], timeout=60)
    return done.stdout.strip() if done.ok and done.stdout.strip() else None


# --------------------------------------------------------------------------- one build


def install(cache: ShaderCache, build_dir: Path, *, redis_endpoint: tuple[str, int] | None = None) -> Path:
    """Write the launcher and its settings into ``build_dir`` (statistics emptied); returns the
    launcher's path. ``redis_endpoint`` replaces the shared Redis's address (the guard's)."""
    assert cache.glslc is not None and cache.version is not None
    folder = build_dir / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    st = os.stat(cache.glslc)
    conf = {"schema": launcher_module.SETTINGS_SCHEMA, "glslc": cache.glslc, "local": cache.local,
            "remote": settings_for(cache.remote, redis_endpoint),
            "identity": {"version": cache.version, "size": st.st_size, "mtime_ns": st.st_mtime_ns},
            "stats": str(folder / "stats.log")}
    settings = folder / "glslc.json"
    fd = os.open(settings, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # may hold the store's credentials
    with os.fdopen(fd, "w") as f:
        json.dump(conf, f, indent=1)
    for name in ("stats.log", "remote-down"):
        (folder / name).unlink(missing_ok=True)
    # The launcher proper is a module beside the program that runs it, so that Python compiles
    # it once (into __pycache__ there) instead of at each of a build's thousand calls.
    (folder / f"{MODULE}.py").write_text(Path(launcher_module.__file__).read_text())
    for module in (json_module, redis_module, http_module):  # its JSON, and the store's module when it has one
        (folder / f"{MODULE}_{module.__name__.rsplit('_', 1)[1]}.py").write_text(Path(module.__file__).read_text())
    script = folder / "glslc"
    script.write_text(f"#!{sys.executable} -IS\n"  # isolated, no site: the standard library only
                      "import os, sys\n"
                      "sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\n"
                      f"from {MODULE} import main\n"
                      "sys.exit(main(sys.argv[1:]))\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


def read_stats(build_dir: Path) -> tuple[CacheStats, list[str]]:
    """What the launcher did in this build (from its statistics file), and the distinct
    errors it met, for one warning line."""
    try:
        lines = (build_dir / FOLDER / "stats.log").read_text().splitlines()
    except OSError:
        lines = []
    hits = sum(1 for ln in lines if ln.startswith("hit "))
    misses = lines.count("miss")
    uncacheable = lines.count("uncacheable")
    errors = sorted({ln.removeprefix("error ") for ln in lines if ln.startswith("error ")})
    count = sum(1 for ln in lines if ln.startswith("error "))
    fallbacks = sum(1 for ln in lines if ln.startswith("error lookup"))  # compiled by glslc, nothing stored
    stats = CacheStats(requests=hits + misses + uncacheable + fallbacks, hits=hits, misses=misses, errors=count,
                       not_cacheable=uncacheable)
    return stats, errors


@dataclass(kw_only=True)
class ShaderRun:
    """The shader cache around one build: the define that points CMake at the launcher (or
    back at the real glslc), and afterwards what it did."""

    cache: ShaderCache
    build_dir: Path
    defines: tuple[tuple[str, str], ...] = ()
    warnings: list[str] | None = None
    _down_said: bool = False

    def report(self) -> dict[str, Any]:
        """What it did; a shared store that failed during the build becomes one warning line."""
        doc = self.cache.describe()
        if self.cache.active:
            stats, errors = read_stats(self.build_dir)
            doc["stats"] = stats.to_dict()
            if errors:
                doc["errors"] = errors[:5]
            down = self.build_dir / FOLDER / "remote-down"
            if self.cache.remote is not None and down.is_file() and not self._down_said:
                self._down_said = True
                why = down.read_text(errors="replace").strip()[:200]
                self.warnings = [*(self.warnings or []), (
                    f"shader cache: the shared store {self.cache.remote.kind} {self.cache.remote.public} failed "
                    f"({why}); glslc compiled what it did not serve, and the rest of the build kept its shaders "
                    "in the local folder only")]
        if self.warnings:
            doc["warnings"] = list(self.warnings)
        return doc


def prepare(launcher: Launcher, build_dir: Path, defines: Sequence[tuple[str, str]], *,
            redis_endpoint: tuple[str, int] | None = None, env: Mapping[str, str] | None = None) -> ShaderRun | None:
    """The shader cache for a build with ``defines`` (None when it builds no Vulkan shaders).
    Without a compiler cache CMake is pointed back at the real glslc, so that a build folder
    that had the launcher loses it."""
    if not wants_shaders(defines):
        return None
    cache = resolve(launcher, env)
    run = ShaderRun(cache=cache, build_dir=build_dir, warnings=[cache.problem] if cache.problem else None)
    if cache.active:
        try:
            run.defines = ((DEFINE, str(install(cache, build_dir, redis_endpoint=redis_endpoint))),)
            return run
        except OSError as exc:
            run.warnings = [f"shader cache: cannot set up the glslc launcher ({exc}); compiling every shader"]
            run.cache = ShaderCache(reason=f"set-up failed: {exc}")
    real = shutil.which("glslc", path=(env or os.environ).get("PATH"))
    run.defines = ((DEFINE, real),) if real else ()
    return run
