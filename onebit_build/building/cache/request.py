"""What the user asked of the compiler cache: a mode, maybe a shared Redis URL and maybe a
scheduler to distribute compiles to, each checked where it enters (command line or
environment). Pure and cheap to import: the command line parses with it before any of the
build pipeline is loaded."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import parse_qs, urlsplit

from onebit_build.core.errors import ConfigError

MODES = ("auto", "sccache", "ccache", "none")
ENV_MODE = "ONEBIT_COMPILER_CACHE"
ENV_URL = "ONEBIT_COMPILER_CACHE_URL"
ENV_DIST = "ONEBIT_COMPILER_CACHE_DIST"
URL_SCHEMES = ("redis", "rediss")
DIST_SCHEMES = ("http", "https")


@dataclass(frozen=True, kw_only=True)
class CacheRequest:
    """``--compiler-cache``, ``--compiler-cache-url`` and ``--compiler-cache-dist`` as given
    (or from the environment). ``dist`` is the scheduler's URL, never a token."""

    mode: str = "auto"
    url: str | None = None
    dist: str | None = None


def request_from(mode: str | None, url: str | None, env: Mapping[str, str], dist: str | None = None) -> CacheRequest:
    """The request from the command line, else ``ONEBIT_COMPILER_CACHE`` /
    ``ONEBIT_COMPILER_CACHE_URL`` / ``ONEBIT_COMPILER_CACHE_DIST``, else ``auto`` with no
    shared backend and no distribution. Pure."""
    text = (mode or env.get(ENV_MODE) or "auto").strip().lower()
    if text not in MODES:
        raise ConfigError(f"compiler cache {text!r} is not one of {', '.join(MODES)}",
                          hint="use --compiler-cache auto|sccache|ccache|none (or ONEBIT_COMPILER_CACHE)")
    url = url or env.get(ENV_URL) or None
    if url is not None:
        parse_url(url)  # checked here, at the edge
        if text == "none":
            raise ConfigError("--compiler-cache-url names a shared cache, but --compiler-cache is none",
                              hint="drop one of them")
    dist = dist or env.get(ENV_DIST) or None
    if dist is not None:
        dist = parse_dist_url(dist)
        if text in ("none", "ccache"):
            raise ConfigError(f"--compiler-cache-dist distributes compiles through sccache, but --compiler-cache "
                              f"is {text}", hint="use --compiler-cache auto or sccache, or drop --compiler-cache-dist")
    return CacheRequest(mode=text, url=url, dist=dist)


def parse_dist_url(text: str) -> str:
    """The scheduler's URL as ``http[s]://HOST:PORT`` (sccache-dist's port 10600 when none is
    given); credentials, a path, a query or a fragment are refused. Pure."""
    shown = _redact_url(text.strip())
    hint = "give the scheduler as http://HOST:PORT (its token comes from $ONEBIT_COMPILER_CACHE_DIST_TOKEN_FILE " \
           "or $ONEBIT_COMPILER_CACHE_DIST_TOKEN)"
    try:
        parts = urlsplit(text.strip())
        port = parts.port or 10600
    except ValueError as exc:
        raise ConfigError(f"scheduler URL {shown!r}: {exc}", hint=hint) from None
    if parts.scheme not in DIST_SCHEMES or not parts.hostname or parts.username or parts.password:
        raise ConfigError(f"scheduler URL {shown!r} is not http://HOST:PORT", hint=hint)
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(f"scheduler URL {shown!r} has a path or query; sccache takes the scheduler's root",
                          hint=hint)
    if not re.fullmatch(r"[A-Za-z0-9.:-]+", parts.hostname):
        raise ConfigError(f"scheduler URL {shown!r}: {parts.hostname!r} is not a host name or address", hint=hint)
    return f"{parts.scheme}://{_host(parts.hostname)}:{port}"


@dataclass(frozen=True, kw_only=True)
class RedisUrl:
    scheme: str
    host: str
    port: int
    db: int = 0
    username: str | None = None
    password: str | None = None

    def endpoint(self, host: str | None = None, port: int | None = None) -> str:
        """``scheme://host:port`` (no credentials, no database)."""
        return f"{self.scheme}://{_host(host or self.host)}:{port or self.port}"

    @property
    def public(self) -> str:
        """The URL as it may be shown and recorded: the password left out."""
        user = f"{self.username}@" if self.username else ""
        db = f"/{self.db}" if self.db else ""
        return f"{self.scheme}://{user}{_host(self.host)}:{self.port}{db}"


def parse_url(text: str) -> RedisUrl:
    """``redis://[USER[:PASSWORD]@]HOST[:PORT][/DB]`` (also ``?db=N``). Pure."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port or 6379
    except ValueError as exc:
        raise ConfigError(f"compiler cache URL {_redact_url(text)!r}: {exc}",
                          hint="e.g. redis://cache.example:6379") from None
    if parts.scheme not in URL_SCHEMES or not parts.hostname:
        raise ConfigError(f"compiler cache URL {_redact_url(text)!r} is not redis://HOST:PORT",
                          hint="give redis://HOST:PORT; for S3, GCS or the GitHub Actions cache set "
                               "sccache's own SCCACHE_* variables")
    db_text = parts.path.strip("/") or (parse_qs(parts.query).get("db") or ["0"])[0]
    if not db_text.isdigit():
        raise ConfigError(f"compiler cache URL {_redact_url(text)!r}: database {db_text!r} is not a number",
                          hint="e.g. redis://HOST:6379/0")
    return RedisUrl(scheme=parts.scheme, host=parts.hostname, port=port, db=int(db_text),
                    username=parts.username or None, password=parts.password or None)


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _redact_url(text: str) -> str:
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", text)
