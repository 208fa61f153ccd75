"""What the compiler cache does for one build: its server (started, watched and stopped),
the statistics before and after (requests, hits, misses), and the report that goes into the
manifest. The choice of launcher and its settings are in ``compiler``."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import psutil

from onebit_build.building.cache.server_use import ServerUse
from onebit_build.building.cache.compiler import START_TIMEOUT_S, Launcher, base_dir_for, build_env, describe
from onebit_build.core.proc import capture
from onebit_build.building.cache.redis_guard import RedisGuard
from onebit_build.building.cache.dist_run import DistRun, read_counts


@dataclass(frozen=True, kw_only=True)
class CacheStats:
    """What the cache did for one build. For sccache, one nvcc compile counts once per
    step it caches (host object, PTX, cubin)."""

    requests: int = 0  # compile requests the launcher saw
    hits: int = 0
    misses: int = 0
    errors: int = 0  # failed or timed-out reads and writes of the cache
    not_cacheable: int = 0

    @property
    def hit_rate(self) -> float | None:
        looked = self.hits + self.misses
        return self.hits / looked if looked else None

    def minus(self, before: "CacheStats") -> "CacheStats":
        return CacheStats(**{k: max(getattr(self, k) - getattr(before, k), 0) for k in
                             ("requests", "hits", "misses", "errors", "not_cacheable")})

    def plus(self, other: "CacheStats") -> "CacheStats":
        return CacheStats(**{k: getattr(self, k) + getattr(other, k) for k in
                             ("requests", "hits", "misses", "errors", "not_cacheable")})

    def to_dict(self) -> dict[str, Any]:
        rate = self.hit_rate
        return {"requests": self.requests, "hits": self.hits, "misses": self.misses, "errors": self.errors,
                "not_cacheable": self.not_cacheable, "hit_rate": None if rate is None else round(rate, 4)}


def parse_sccache_stats(text: str) -> CacheStats:
    """``sccache --show-stats --stats-format=json``. Pure."""
    s = json.loads(text)["stats"]

    def total(name: str) -> int:
        return sum(int(v) for v in (s.get(name) or {}).get("counts", {}).values())

    return CacheStats(
        requests=int(s.get("compile_requests", 0)),
        hits=total("cache_hits"), misses=total("cache_misses"),
        errors=int(s.get("cache_read_errors", 0)) + int(s.get("cache_write_errors", 0))
                      + int(s.get("cache_timeouts", 0)) + total("cache_errors"),
        not_cacheable=int(s.get("requests_not_cacheable", 0)) + int(s.get("requests_unsupported_compiler", 0)),
    )


_CCACHE_UNCACHEABLE = re.compile(r"^(could_not_|unsupported_|compiler_produced_|bad_compiler_arguments|"
                                 r"multiple_source_files|no_input_file|output_to_stdout|preprocessor_error|"
                                 r"compile_failed|autoconf_test)")


def parse_ccache_stats(text: str) -> CacheStats:
    """``ccache --print-stats`` (one ``name<TAB>value`` per line). Pure."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition("\t")
        if value.strip().lstrip("-").isdigit():
            values[name.strip()] = int(value)
    hits = values.get("direct_cache_hit", 0) + values.get("preprocessed_cache_hit", 0)
    misses = values.get("cache_miss", 0)
    uncacheable = sum(v for k, v in values.items() if _CCACHE_UNCACHEABLE.match(k))
    errors = (values.get("remote_storage_error", 0) + values.get("remote_storage_timeout", 0)
              + values.get("internal_error", 0))
    return CacheStats(requests=hits + misses + uncacheable, hits=hits, misses=misses, errors=errors,
                      not_cacheable=uncacheable)


def read_stats(launcher: Launcher, env: Mapping[str, str]) -> CacheStats | None:
    """The launcher's counters now (None when they cannot be read)."""
    if launcher.program is None:
        return None
    if launcher.kind == "sccache":
        done = capture([launcher.program, "--show-stats", "--stats-format=json"], env=env, timeout=START_TIMEOUT_S)
        parse = parse_sccache_stats
    else:
        done = capture([launcher.program, "--print-stats"], env=env, timeout=START_TIMEOUT_S)
        parse = parse_ccache_stats
    if not done.ok:
        return None
    try:
        return parse(done.stdout)
    except (ValueError, KeyError, TypeError):
        return None


# --------------------------------------------------------------------------- description





def runtime_dir() -> Path:
    """Where the tool's sccache sockets live: short, per user, not shared."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if not base or not os.access(base, os.W_OK):
        base = tempfile.gettempdir()
    path = Path(base) / f"onebit-sccache-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def shared_server_key(launcher: Launcher) -> str:
    """Identity of the per-user server for ``launcher``: its program, version, cache
    folder and every SCCACHE_* variable (secrets only hashed)."""
    doc = {"program": launcher.program, "version": launcher.version, "cache_dir": launcher.cache_dir,
           "variables": list(launcher.passthrough)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def server_answers(sock: Path) -> bool:
    """Whether an sccache server listens on the socket ``sock``."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2.0)
    try:
        s.connect(str(sock))
        return True
    except OSError:
        return False
    finally:
        s.close()


def start_server(program: str, env: Mapping[str, str]) -> str | None:
    """Start sccache's server for ``env`` (its socket in ``SCCACHE_SERVER_UDS``) unless one
    answers there already. None when it runs; else why not, in one line."""
    sock = Path(env["SCCACHE_SERVER_UDS"])
    with open(sock.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two builds starting the same server: one does
        if server_answers(sock):
            return None
        sock.unlink(missing_ok=True)
        done = capture([program, "--start-server"], env=env, timeout=START_TIMEOUT_S)
        if done.ok and server_answers(sock):
            return None
        lines = [ln.strip() for ln in (done.stderr + "\n" + done.stdout).splitlines() if ln.strip()]
        errors = [ln for ln in lines if "error:" in ln] or lines[-1:]
        return errors[0].removeprefix("sccache: ").removeprefix("error: ") if errors else f"exit code {done.returncode}"


def stop_server(program: str, env: Mapping[str, str]) -> None:
    """Stop the server on ``env``'s socket, and any other server process started for that
    socket (a client that lost patience can start a second one)."""
    sock = Path(env["SCCACHE_SERVER_UDS"])
    if server_answers(sock):
        capture([program, "--stop-server"], env=env, timeout=START_TIMEOUT_S)
    for _ in range(50):  # the server removes its socket as it exits
        if not server_answers(sock):
            break
        time.sleep(0.1)
    left = server_pids(program, sock)
    for pid in left:
        try:
            os.kill(pid, 15)
        except OSError:
            pass
    for _ in range(50):
        if not any(_running(pid) for pid in left):
            break
        time.sleep(0.1)


def _running(pid: int) -> bool:
    """Whether ``pid`` is alive (an exited process its parent has not reaped is not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def server_pids(program: str, sock: Path) -> list[int]:
    """Server processes of ``program`` whose environment names the socket ``sock`` (the
    compile commands of a build are sccache processes with that socket too, but they are
    not servers)."""
    exe = os.path.realpath(program)
    pids = []
    for p in psutil.process_iter(["exe"]):  # a process of another user reads as exe None
        if p.pid == os.getpid() or not p.info["exe"] or os.path.realpath(p.info["exe"]) != exe:
            continue
        try:
            env = p.environ()
        except psutil.Error:
            continue
        if env.get("SCCACHE_SERVER_UDS") == str(sock) and env.get("SCCACHE_START_SERVER") == "1":
            pids.append(p.pid)
    return pids


# --------------------------------------------------------------------------- one build's session


@dataclass(kw_only=True)
class CacheReport:
    """What the cache did for one build, for the manifest and the report."""

    launcher: Launcher
    stats: CacheStats | None = None
    server: str | None = None  # "per-build" or "shared"
    warnings: list[str] = field(default_factory=list)
    # Other builds that used the shared server meanwhile: their compiles are in ``stats`` too.
    shared_with: int | None = None
    dist: dict[str, Any] | None = None  # distributed compiles (dist_run.DistRun.report)

    def to_dict(self) -> dict[str, Any]:
        doc = describe(self.launcher)
        if self.launcher.active:
            doc["server"] = self.server
            doc["stats"] = self.stats.to_dict() if self.stats else None
            if self.shared_with:
                doc["stats_shared_with_builds"] = self.shared_with
            if self.dist is not None:
                doc["dist"] = self.dist
        if self.warnings:
            doc["warnings"] = list(self.warnings)
        return doc


class CacheSession:
    """The compiler cache around one build: starts what it needs (sccache's server, the
    guard in front of a shared Redis), gives the build's environment, and at the end
    reads what the cache did. Never fails a build: a launcher that cannot start is
    dropped with a warning (see :attr:`launcher` after entering)."""

    def __init__(self, launcher: Launcher, *, source_dir: Path, build_dir: Path,
                 defines: tuple[tuple[str, str], ...] = (), build_type: str = "Release", ninja: Path | None = None):
        self.launcher = launcher
        self.source_dir = source_dir
        self.build_dir = build_dir
        self._build = {"defines": defines, "build_type": build_type, "ninja": ninja}  # what distribution checks with
        self.dist: DistRun | None = None
        self._carried: CacheStats | None = None  # the counts of a server stopped during the build
        self.env: dict[str, str] = {}
        self.report = CacheReport(launcher=launcher)
        self._guard: Any = None
        self._sock_dir: Path | None = None
        self._before: CacheStats | None = None
        self._per_build = False
        self._finished = False
        self._use: ServerUse | None = None

    @property
    def warnings(self) -> list[str]:
        return self.report.warnings

    @property
    def redis_endpoint(self) -> tuple[str, int] | None:
        """Where the build reaches the shared Redis (the guard in front of it), if anywhere."""
        return ("127.0.0.1", self._guard.port) if self._guard is not None else None

    def __enter__(self) -> "CacheSession":
        try:
            self._start()
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()

    def _start(self) -> None:
        ln = self.launcher
        if ln.kind == "ccache":
            self.env = build_env(ln, base_dir=base_dir_for(self.source_dir, self.build_dir))
            self._before = read_stats(ln, {**os.environ, **self.env})
            self.report.server = None
            return
        if ln.kind != "sccache":
            return
        assert ln.program is not None
        self._per_build = ln.backend != "local" or ln.dist is not None
        endpoint = None
        if ln.url is not None and ln.url.scheme == "redis":

            self._guard = RedisGuard(ln.url.host, ln.url.port)
            self._guard.start()
            endpoint = self._guard.url
        if self._per_build:
            self._sock_dir = Path(tempfile.mkdtemp(prefix="b-", dir=runtime_dir()))
            sock = self._sock_dir / "server.sock"
        else:
            sock = runtime_dir() / f"{shared_server_key(ln)}.sock"
        self.env = build_env(ln, socket_path=sock, redis_endpoint=endpoint, per_build_server=self._per_build)
        self.report.server = "per-build" if self._per_build else "shared"
        if ln.dist and self._sock_dir is not None:
            self.dist = DistRun(ln, folder=self._sock_dir, build_dir=self.build_dir, **self._build)
            self.env["SCCACHE_CONF"] = str(self.dist.conf)
        why = start_server(ln.program, self._server_env())
        if why is not None:
            self.warnings.append(f"compiler cache: sccache could not start ({why}); building without a compiler cache")
            self._close()
            self.launcher = Launcher(kind="none", mode=ln.mode, reason=f"sccache could not start: {why}")
            self.report = CacheReport(launcher=self.launcher, warnings=self.warnings)
            self.env = {}
            return
        if not self._per_build:
            self._use = ServerUse(sock).enter()
        if self.dist is not None:  # its probes are not the build's compiles: counted before them
            self.dist.begin({**os.environ, **self.env}, self._restart_server)
            self._carried = None
        self._before = read_stats(ln, {**os.environ, **self.env})

    def _server_env(self) -> dict[str, str]:
        return {**os.environ, **self.env, **(self.dist.server_env() if self.dist else {})}

    def _restart_server(self) -> None:
        """The per-build server again, with the configuration as it is now (distribution stopped):
        the counts so far are kept; compiles meanwhile run here (``SCCACHE_IGNORE_SERVER_IO_ERROR``)."""
        ln, env = self.launcher, {**os.environ, **self.env}
        assert ln.program is not None and self.dist is not None
        now = read_stats(ln, env)
        if now is not None:
            done = now.minus(self._before) if self._before else now
            self._carried = self._carried.plus(done) if self._carried else done
        self.dist.carry(read_counts(ln.program, env))
        stop_server(ln.program, env)
        why = start_server(ln.program, self._server_env())
        if why is not None:
            self.warnings.append(f"compiler cache: sccache could not start again ({why}); compiles run without it")
        self._before = read_stats(ln, env)

    def dist_after_build(self, replace) -> tuple[list[str], list[str]]:
        """Ends distribution's spot-check; where it found a difference, the objects build servers
        made are compiled again here by ``replace`` (see ``DistRun.repair``)."""
        return self.dist.repair(replace) if self.dist is not None else ([], [])

    def finish(self) -> CacheReport:
        """Read what the cache did, stop what was started for this build; idempotent."""
        if self._finished:
            return self.report
        self._finished = True
        ln = self.launcher
        if ln.active and self.env:
            after = read_stats(ln, {**os.environ, **self.env})
            if after is not None:
                self.report.stats = after.minus(self._before) if self._before else after
            if self._carried is not None:
                self.report.stats = self._carried.plus(self.report.stats) if self.report.stats else self._carried
            if self.dist is not None:
                last = None if self.dist.stopped else read_counts(ln.program, {**os.environ, **self.env})
                self.report.dist = self.dist.report(last)
                self.warnings.extend(self.dist.warnings)
        if self._use is not None:
            self.report.shared_with = self._use.others()
        self._close()
        self._note_outage()
        return self.report

    def _close(self) -> None:
        ln = self.launcher
        if self._per_build and ln.program and self.env.get("SCCACHE_SERVER_UDS"):
            stop_server(ln.program, {**os.environ, **self.env})
            self._per_build = False
        if self._guard is not None:
            self._guard.stop()
        if self._sock_dir is not None:
            shutil.rmtree(self._sock_dir, ignore_errors=True)
            self._sock_dir = None

    def _note_outage(self) -> None:
        """One warning line when the shared cache went away, or reads and writes failed."""
        outage = getattr(self._guard, "outage", None)
        url = self.launcher.url.public if self.launcher.url else self.launcher.backend
        if outage is not None:
            when = time.strftime("%H:%M:%S", time.localtime(outage.since))
            back = "; it answered again later" if outage.recovered else ""
            self.warnings.append(f"compiler cache: the shared cache {url} could not be reached from "
                                 f"{when} on ({outage.reason}); "
                                 f"{outage.lookups} lookups missed and {outage.stores} objects "
                                 f"were kept here only{back}")
        elif self.report.stats is not None and self.report.stats.errors:
            where = (f"the shared cache {url}" if self.launcher.backend != "local"
                     else f"the cache in {self.launcher.cache_dir}")
            self.warnings.append(f"compiler cache: {self.report.stats.errors} reads or writes of {where} failed; "
                                 f"those objects were compiled here")
