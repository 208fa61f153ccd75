"""Doctor's lines for the caches that reach beyond this machine: the sccache-dist scheduler that
``--compiler-cache-dist`` names (``sccache --dist-status`` from a short-lived sccache server of
its own), and the shared store the shader cache uses (one read of an entry no build writes)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Mapping

from onebit_build.building.cache import dist
from onebit_build.building.cache.compiler import START_TIMEOUT_S, Launcher, resolve
from onebit_build.building.cache.request import CacheRequest
from onebit_build.building.cache.session import runtime_dir, start_server, stop_server
from onebit_build.building.shaders.shader_remote import plan_remote, settings_for
from onebit_build.core.errors import OnebitError
from onebit_build.core.proc import capture
from onebit_build.doctor.requirements import Check

DIST = "distributed compiles"
SHADERS = "shader cache store"
DIST_FIX = ("start the scheduler and build servers (docs/distributed.md), or check the URL and the token "
            f"(${dist.ENV_TOKEN_FILE} or ${dist.ENV_TOKEN})")


def cache_checks(request: CacheRequest | None, environ: Mapping[str, str]) -> list[Check]:
    request = request or CacheRequest()
    try:
        launcher = resolve(request, environ)
    except OnebitError as exc:
        return [Check(name=DIST, ok=False, detail=exc.message, fix=exc.hint)]
    return [dist_check(launcher, environ), shader_store_check(launcher, environ)]


def dist_check(launcher: Launcher, environ: Mapping[str, str]) -> Check:
    """The scheduler's status as a build would see it."""
    if not launcher.dist or not launcher.program:
        return Check(name=DIST, ok=None, detail="not configured (--compiler-cache-dist URL or "
                                                 "$ONEBIT_COMPILER_CACHE_DIST)")
    try:
        token = dist.read_token(environ)
        status = scheduler_status(launcher, token, environ)
    except OnebitError as exc:
        return Check(name=DIST, ok=False, detail=exc.message, fix=exc.hint)
    return Check(name=DIST, ok=status.usable, detail=f"{launcher.dist}: {status.line}",
                 fix=None if status.usable else DIST_FIX)


def scheduler_status(launcher: Launcher, token: str, environ: Mapping[str, str]) -> dist.DistStatus:
    """``sccache --dist-status`` from a server of its own (own socket, own empty cache folder),
    stopped at once."""
    assert launcher.program and launcher.dist
    folder = Path(tempfile.mkdtemp(prefix="doctor-", dir=runtime_dir()))
    try:
        conf = folder / "sccache.conf"
        dist.write_client_config(conf, dist.client_config(launcher.dist, token, dist.toolchain_dir(environ)))
        env = {**environ, "SCCACHE_CONF": str(conf), "SCCACHE_SERVER_UDS": str(folder / "server.sock"),
               "SCCACHE_DIR": str(folder / "cache"), "SCCACHE_IDLE_TIMEOUT": "0"}
        for name in [k for k in env if k.startswith("SCCACHE_") and k not in
                     ("SCCACHE_CONF", "SCCACHE_SERVER_UDS", "SCCACHE_DIR", "SCCACHE_IDLE_TIMEOUT")]:
            del env[name]  # no other backend: the question is the scheduler only
        why = start_server(launcher.program, env)
        if why is not None:
            return dist.DistStatus(state="unknown", detail=f"sccache could not start: {why}")
        try:
            done = capture([launcher.program, "--dist-status"], env=env, timeout=START_TIMEOUT_S)
        finally:
            stop_server(launcher.program, env)
        return dist.parse_status(done.stdout) if done.ok else dist.DistStatus(state="unknown", detail=done.stderr[:200])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def shader_store_check(launcher: Launcher, environ: Mapping[str, str]) -> Check:
    """Whether the shader cache's shared store answers (a read of a name no entry has)."""
    try:
        remote = plan_remote(launcher.backend, environ, launcher.url) if launcher.active else None
    except OnebitError as exc:
        return Check(name=SHADERS, ok=False, detail=f"{exc.message}; shaders are cached locally only", fix=exc.hint)
    if remote is None:
        where = f"the compiler cache's {launcher.backend} backend is not shared with shaders; " \
            if launcher.backend not in ("local", "none") else ""
        return Check(name=SHADERS, ok=None, detail=f"{where}a local folder only "
                                                   f"(S3, WebDAV or Redis through the compiler cache's variables)")
    from onebit_build.building.shaders.glslc import remote_store

    try:
        remote_store(settings_for(remote) or {}).get("0" * 64)
    except (OSError, ValueError) as exc:
        return Check(name=SHADERS, ok=False, detail=f"{remote.kind} {remote.public}: {str(exc)[:160]}",
                     fix="check the store's address and credentials; meanwhile builds compile shaders here")
    return Check(name=SHADERS, ok=True, detail=f"{remote.kind} {remote.public} answers")

