"""Where the shader cache shares its entries: the compiler cache's own shared store, read from
the variables users already set for sccache. Redis (``--compiler-cache-url`` or
``SCCACHE_REDIS*``), an S3-compatible bucket (``SCCACHE_BUCKET``, ``SCCACHE_ENDPOINT``,
``SCCACHE_REGION``, ``SCCACHE_S3_USE_SSL``, ``SCCACHE_S3_KEY_PREFIX``,
``SCCACHE_S3_ENABLE_VIRTUAL_HOST_STYLE``, ``SCCACHE_S3_NO_CREDENTIALS``; credentials from
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN`` or the profile of
``~/.aws/credentials``) or a WebDAV folder (``SCCACHE_WEBDAV_ENDPOINT``,
``SCCACHE_WEBDAV_KEY_PREFIX``, ``SCCACHE_WEBDAV_USERNAME`` / ``SCCACHE_WEBDAV_PASSWORD`` or
``SCCACHE_WEBDAV_TOKEN``). Other backends (GCS, Azure, the GitHub Actions cache...) leave the
shader cache local: docs/caches.md says how CI keeps that folder. Pure but for reading the
credentials file."""

from __future__ import annotations

import configparser
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit

from onebit_build.building.cache.request import RedisUrl
from onebit_build.core.errors import ConfigError

KINDS = ("redis", "s3", "webdav")
_TRUE = ("1", "true", "on", "yes")
BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
PREFIX_RE = re.compile(r"[A-Za-z0-9._/-]*")
REGION_RE = re.compile(r"[a-z0-9-]{1,32}")


@dataclass(frozen=True, kw_only=True)
class Remote:
    """A shared store of the shader cache. ``settings`` may hold secrets: they go to the
    launcher's settings file (mode 0600) only; ``public`` is what is shown and recorded."""

    kind: str
    public: str
    settings: Mapping[str, Any] = field(default_factory=dict, repr=False)
    redis: RedisUrl | None = None  # for Redis, whose address the build may replace (the guard's)


def plan_remote(backend: str, env: Mapping[str, str], redis: RedisUrl | None = None) -> Remote | None:
    """The shared store for the compiler cache's ``backend`` (None: none the shader cache can
    use). ConfigError when the variables do not name a usable one. Pure but for credentials."""
    if redis is not None:  # --compiler-cache-url or sccache's own SCCACHE_REDIS*
        return Remote(kind="redis", public=redis.public, redis=redis)
    if backend == "s3":
        return _s3(env)
    if backend == "webdav":
        return _webdav(env)
    return None


def _url(text: str, what: str) -> tuple[str, str]:
    """(scheme://host[:port], path) of an http(s) URL; ConfigError for anything else. Pure."""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError as exc:
        raise ConfigError(f"{what} {text!r}: {exc}", hint="give http[s]://HOST[:PORT]") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.query \
            or parts.fragment or not PREFIX_RE.fullmatch(parts.path):
        raise ConfigError(f"{what} is not an http[s]://HOST[:PORT][/PATH] URL without credentials",
                          hint="credentials come from their own variables")
    return f"{parts.scheme}://{parts.netloc}", parts.path.rstrip("/")


def _prefix(text: str, what: str) -> str:
    """A key prefix as a folder (``a/b/``), or ``""``. Pure."""
    clean = text.strip("/")
    if not PREFIX_RE.fullmatch(clean) or ".." in clean.split("/"):
        raise ConfigError(f"{what} {text!r} is not a key prefix (letters, digits, ._/-)", hint=f"change {what}")
    return f"{clean}/" if clean else ""


def _s3(env: Mapping[str, str]) -> Remote:
    bucket = env.get("SCCACHE_BUCKET", "")
    if not BUCKET_RE.fullmatch(bucket) or ".." in bucket:
        raise ConfigError(f"SCCACHE_BUCKET {bucket!r} is not an S3 bucket name", hint="change SCCACHE_BUCKET")
    region = env.get("SCCACHE_REGION") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
    if not REGION_RE.fullmatch(region):
        raise ConfigError(f"SCCACHE_REGION {region!r} is not a region name", hint="change SCCACHE_REGION")
    endpoint = env.get("SCCACHE_ENDPOINT", "").strip()
    virtual = env.get("SCCACHE_S3_ENABLE_VIRTUAL_HOST_STYLE", "").lower() in _TRUE
    if endpoint:
        if "://" not in endpoint:
            ssl = env.get("SCCACHE_S3_USE_SSL", "true").lower() in _TRUE
            endpoint = f"{'https' if ssl else 'http'}://{endpoint}"
        origin, path = _url(endpoint, "SCCACHE_ENDPOINT")
    else:
        origin, path, virtual = f"https://s3.{region}.amazonaws.com", "", True
    if virtual:
        scheme, host = origin.split("://", 1)
        base = f"{scheme}://{bucket}.{host}{path}"
    else:
        base = f"{origin}{path}/{bucket}"
    prefix = _prefix(env.get("SCCACHE_S3_KEY_PREFIX", ""), "SCCACHE_S3_KEY_PREFIX")
    settings: dict[str, Any] = {"kind": "s3", "base": base, "region": region, "prefix": prefix}
    if env.get("SCCACHE_S3_NO_CREDENTIALS", "").lower() not in _TRUE:
        settings.update(_aws_credentials(env))
    mode = "" if settings.get("access_key") else " (read only: no credentials)"
    return Remote(kind="s3", public=f"{base}/{prefix}{mode}", settings=settings)


def _aws_credentials(env: Mapping[str, str]) -> dict[str, str]:
    """The static credentials of the environment, else of the profile in ``~/.aws/credentials``
    (``AWS_SHARED_CREDENTIALS_FILE``, ``AWS_PROFILE``); empty when there are none."""
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        found = {"access_key": env["AWS_ACCESS_KEY_ID"], "secret_key": env["AWS_SECRET_ACCESS_KEY"]}
        if env.get("AWS_SESSION_TOKEN"):
            found["session_token"] = env["AWS_SESSION_TOKEN"]
        return found
    home = Path(env.get("HOME") or "~").expanduser()
    path = Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials")
    parser = configparser.ConfigParser()
    try:
        parser.read(path)
        profile = parser[env.get("AWS_PROFILE") or "default"]
        found = {"access_key": profile["aws_access_key_id"], "secret_key": profile["aws_secret_access_key"]}
    except (configparser.Error, KeyError, OSError, UnicodeDecodeError):
        return {}
    if profile.get("aws_session_token"):
        found["session_token"] = profile["aws_session_token"]
    return found


def _webdav(env: Mapping[str, str]) -> Remote:
    origin, path = _url(env.get("SCCACHE_WEBDAV_ENDPOINT", "").strip(), "SCCACHE_WEBDAV_ENDPOINT")
    prefix = _prefix(env.get("SCCACHE_WEBDAV_KEY_PREFIX", ""), "SCCACHE_WEBDAV_KEY_PREFIX")
    settings: dict[str, Any] = {"kind": "webdav", "base": f"{origin}{path}", "prefix": prefix}
    if env.get("SCCACHE_WEBDAV_TOKEN"):
        settings["token"] = env["SCCACHE_WEBDAV_TOKEN"]
    elif env.get("SCCACHE_WEBDAV_USERNAME"):
        settings.update(username=env["SCCACHE_WEBDAV_USERNAME"], password=env.get("SCCACHE_WEBDAV_PASSWORD", ""))
    for name in ("token", "username", "password"):
        if any(c in str(settings.get(name, "")) for c in "\r\n"):
            raise ConfigError(f"the WebDAV {name} holds a line break", hint=f"fix SCCACHE_WEBDAV_{name.upper()}")
    return Remote(kind="webdav", public=f"{origin}{path}/{prefix}", settings=settings)


def settings_for(remote: Remote | None, redis_endpoint: tuple[str, int] | None = None) -> dict[str, Any] | None:
    """What the launcher's settings file says of the store (secrets included). Pure."""
    if remote is None:
        return None
    if remote.redis is not None:
        url = remote.redis
        host, port = redis_endpoint or (url.host, url.port)
        return {"kind": "redis", "host": host, "port": port, "db": url.db, "username": url.username,
                "password": url.password}
    return dict(remote.settings)

