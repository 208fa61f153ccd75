"""One build's distributed compiles: the scheduler's status when the build's sccache server
starts, the probe of each toolchain, the spot-check while the build runs, stopping
distribution (one warning) when any of them fails, and what the manifest records. The facts
and the files are in ``dist``; the spot-check is ``dist_watch``."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from onebit_build.building.cache import dist
from onebit_build.building.cache.compiler import START_TIMEOUT_S, Launcher, map_arguments, prefix_maps
from onebit_build.building.cache.dist_watch import Checked, SpotCheck
from onebit_build.building.cache.entries import find_entries
from onebit_build.building.compilers import compiler_path
from onebit_build.core.fsutil import sha256_file
from onebit_build.core.proc import capture

PROBE_TIMEOUT_S = 300.0
PROBE_SOURCES = {
    "C": ("probe.c", "struct onebit_point { int x; double y; };\n"
                     "static double onebit_weigh(const struct onebit_point *p, int n) {\n"
                     "  double s = 0; for (int i = 0; i < n; i++) s += p[i].x * p[i].y; return s; }\n"
                     "const char onebit_probe_nonce[] = \"@NONCE@\";\n"
                     "double onebit_probe(int n) {\n"
                     "  struct onebit_point pts[3] = {{1, 0.5}, {2, 1.5}, {n, 2.5}}; return onebit_weigh(pts, 3); }\n"),
    "CXX": ("probe.cpp", "#include <vector>\n"
                         "template <class T> struct OnebitBox { T v; T twice() const { return v + v; } };\n"
                         "extern const char onebit_probe_nonce[] = \"@NONCE@\";\n"
                         "double onebit_probe(int n) {\n"
                         "  std::vector<OnebitBox<double>> b{{0.5}, {1.5}, {double(n)}};\n"
                         "  double s = 0; for (const auto &x : b) s += x.twice(); return s; }\n"),
}


class DistRun:
    """Distribution for one build: made before its sccache server starts (the configuration
    file), begun once it answers, ended after the build."""

    def __init__(self, launcher: Launcher, *, folder: Path, build_dir: Path,
                 defines: Sequence[tuple[str, str]] = (), build_type: str = "Release", ninja: Path | None = None,
                 environ: Mapping[str, str] | None = None):
        environ = os.environ if environ is None else environ
        assert launcher.dist and launcher.program
        self.launcher, self.folder, self.build_dir = launcher, folder, build_dir
        self.defines, self.build_type, self.ninja = tuple(defines), build_type, ninja
        self.debug = dist.debug_build(self.defines, build_type, environ)
        self.conf = folder / "sccache.conf"
        self.log = folder / "sccache-server.log"
        self.probes_file = dist.probes_file(environ)
        dist.write_client_config(self.conf, dist.client_config(launcher.dist, dist.read_token(environ),
                                                               dist.toolchain_dir(environ)))
        self.status: dist.DistStatus | None = None
        self.probes: dict[str, str] = {}
        self.stopped: str | None = None  # why distribution stopped, if it did
        self.counts = dist.DistCounts()  # of the servers that ran before the last restart
        self.recompiled: list[str] = []
        self.purged: list[str] = []
        self.watch: SpotCheck | None = None
        self.warnings: list[str] = []  # one at most: distribution stopped, and why
        self.baseline: dist.DistCounts | None = None  # the server's counts when the build began
        self.probe_compiles = dist.DistCounts()
        self._restart: Callable[[], None] = lambda: None  # the session's, given to begin()

    def server_env(self) -> dict[str, str]:
        """What the build's sccache server gets besides the build's environment: its log."""
        if self.stopped:
            return {}
        return {"SCCACHE_LOG": dist.SERVER_LOG_LEVEL, "SCCACHE_ERROR_LOG": str(self.log)}

    # ----------------------------------------------------------------------- begin

    def begin(self, env: Mapping[str, str], restart: Callable[[], None]) -> None:
        """Once the server answers: the scheduler's status, the probes, the watch; ``restart``
        starts the server again (after distribution stopped). The probes' own compiles are
        not the build's: the counts start after them."""
        self._restart = restart
        self._begin(env)
        self.probe_compiles, self.counts = self.counts, dist.DistCounts()
        self.baseline = None if self.stopped else read_counts(self.launcher.program, env)

    def _begin(self, env: Mapping[str, str]) -> None:
        done = capture([self.launcher.program, "--dist-status"], env=env, timeout=START_TIMEOUT_S)
        self.status = dist.parse_status(done.stdout) if done.ok else dist.DistStatus(
            state="unknown", detail=(done.stderr.strip().splitlines() or ["no answer"])[-1][:200])
        if not self.status.usable:
            return self._stop(f"the scheduler {self.launcher.dist} is not usable ({self.status.line})")
        for lang, kind in (("C", "c"), ("CXX", "cxx")):
            named = compiler_path(kind, self.defines, env)
            compiler = shutil.which(named, path=env.get("PATH")) if named else None
            why = self._probe(lang, compiler, env) if compiler else None
            if why:
                return self._stop(why)
        self.watch = SpotCheck(self.log, self.build_dir, launchers=(self.launcher.program,), ninja=self.ninja,
                               env=env, on_mismatch=self._mismatch).start()

    def _probe_flags(self, lang: str, folder: Path) -> list[str]:
        flags = ["-O2", "-fPIC"] + (["-g", dist.NO_COLUMNS] if self.debug else [])
        return flags + map_arguments(prefix_maps(folder), lang, plain_debug=self.debug)

    def _probe(self, lang: str, compiler: str, env: Mapping[str, str]) -> str | None:
        """The same small source compiled by a build server and here; None when the objects are
        identical (or were, the last time this scheduler met this toolchain), else why not."""
        name, text = PROBE_SOURCES[lang]
        key = dist.probe_key(self.launcher.dist or "", compiler, ["-O2", "-fPIC", *(["-g"] if self.debug else [])])
        if (when := dist.remembered(self.probes_file, key)) is not None:
            self.probes[lang] = f"identical (probed {when})"
            return None
        folder = self.folder / f"probe-{lang.lower()}"
        folder.mkdir(exist_ok=True)
        (folder / name).write_text(text.replace("@NONCE@", uuid.uuid4().hex))  # new, so that the cache misses
        argv = [compiler, *self._probe_flags(lang, folder), "-c", name, "-o", "probe.o"]
        before = read_counts(self.launcher.program, env)
        remote = capture([self.launcher.program, *argv], cwd=folder, env=env, timeout=PROBE_TIMEOUT_S)
        after = read_counts(self.launcher.program, env)
        sent = after.minus(before) if after and before else dist.DistCounts()
        if not remote.ok or not sent.total:
            self.probes[lang] = "not compiled remotely"
            why = "it failed remotely and ran here" if sent.errors else "no build server compiled it"
            return f"the probe compile of {Path(compiler).name} was not distributed ({why})"
        (folder / "probe.o").replace(folder / "remote.o")
        here = capture(argv, cwd=folder, env=env, timeout=PROBE_TIMEOUT_S)
        if not here.ok:
            self.probes[lang] = "the local compile failed"
            return f"the probe compile of {Path(compiler).name} failed here"
        if (folder / "probe.o").read_bytes() != (folder / "remote.o").read_bytes():
            self.probes[lang] = "differs"
            return f"a build server's object of the probe differs from {Path(compiler).name}'s here"
        self.probes[lang] = "identical"
        dist.remember(self.probes_file, key, time.strftime("%Y-%m-%d"))
        return None

    # ----------------------------------------------------------------------- stop

    def _stop(self, why: str) -> None:
        self.stopped = why
        dist.write_client_config(self.conf, dist.client_config(None, None, Path()))
        self._restart()
        self.warnings.append(f"compiler cache: {why}; compiling here without distribution")

    def carry(self, counts: dist.DistCounts | None) -> None:
        """The counts of a server about to be stopped (the restart starts at zero)."""
        if counts is not None:
            self.counts = self.counts.plus(counts)

    def _mismatch(self, checked: Checked) -> None:
        self._stop(f"an object a build server compiled differs from the one compiled here ({checked.name})")
        self.purge([checked.remote])

    # ----------------------------------------------------------------------- end

    def repair(self, replace: Callable[[list[str]], tuple[list[str], list[str]]]) -> tuple[list[str], list[str]]:
        """Ends the spot-check. Where it found an object that differs, every object build servers
        made before distribution stopped is compiled again here by ``replace`` (which returns the
        objects replaced and why others were not), and the cache entries of those that changed
        are removed."""
        names = self.watch.stop() if self.watch is not None else []
        if not names:
            return [], []
        before = {n: _sha(self.build_dir / n) for n in names}
        fixed, failed = replace(names)
        self.recompiled = list(fixed)
        self.purge([before[n] for n in fixed if before.get(n) and before[n] != _sha(self.build_dir / n)])
        return fixed, failed

    def purge(self, shas: Sequence[str]) -> None:
        """Remove the local cache's entries holding objects a build server made differently."""
        if self.launcher.backend != "local" or not self.launcher.cache_dir:
            return
        for sha in shas:
            for entry in find_entries(Path(self.launcher.cache_dir), sha256=sha):
                entry.unlink(missing_ok=True)
                self.purged.append(entry.name)

    def report(self, last: dist.DistCounts | None) -> dict[str, Any]:
        counts = self.counts.plus(last) if last is not None else self.counts
        counts = counts.minus(self.baseline) if self.baseline is not None else counts
        checks = self.watch.checked if self.watch else []
        doc: dict[str, Any] = {
            "scheduler": self.launcher.dist, "status": self.status.line if self.status else None,
            "debug_info": self.debug, "probes": dict(self.probes),
            "probe_compiles": dict(self.probe_compiles.per_server),
            "dist_compiles": dict(counts.per_server), "dist_errors": counts.errors,
            "spot_checks": {"checked": len(checks), "identical": sum(c.same for c in checks),
                            "differ": [c.name for c in checks if c.local is not None and not c.same],
                            "not_run": [f"{c.name}: {c.detail}" for c in checks if c.local is None]},
            "stopped": self.stopped,
        }
        if self.recompiled:
            doc["compiled_again_here"] = list(self.recompiled)
        if self.purged:
            doc["cache_entries_removed"] = list(self.purged)
        return doc


def read_counts(program: str | None, env: Mapping[str, str]) -> dist.DistCounts | None:
    """The distribution counts of the server on ``env``'s socket (None when unreadable)."""
    if program is None:
        return None
    done = capture([program, "--show-stats", "--stats-format=json"], env=env, timeout=START_TIMEOUT_S)
    try:
        return dist.parse_counts(done.stdout) if done.ok else None
    except (ValueError, KeyError, TypeError):
        return None


def _sha(path: Path) -> str | None:
    try:
        return sha256_file(path)
    except OSError:
        return None
