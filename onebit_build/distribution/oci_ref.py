"""OCI references (``oci://REGISTRY/REPOSITORY[:TAG|@DIGEST]``) and the credentials for a
registry, as the docker and oras clients keep them.

A reference is checked against the distribution specification's grammar before anything is
sent: the registry is a host name or address with an optional port, the repository is
lower-case path components, a tag is at most 128 word characters. Credentials never come
from the reference itself (a command line ends up in shell histories and process lists):
they come from ``ONEBIT_OCI_USERNAME`` / ``ONEBIT_OCI_PASSWORD``, else from the docker
configuration file that docker, podman and oras write (``$REGISTRY_AUTH_FILE``,
``$DOCKER_CONFIG/config.json``, ``~/.docker/config.json``). No message holds a secret.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from onebit_build.core.errors import ConfigError

SCHEME = "oci://"
# The distribution specification's grammar (distribution-spec, "Pulling manifests").
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
                   r"[A-Za-z0-9])?)*")
USER_VARIABLE, PASSWORD_VARIABLE = "ONEBIT_OCI_USERNAME", "ONEBIT_OCI_PASSWORD"
_EXAMPLE = "e.g. oci://registry.example.org/team/llama-builds or oci://127.0.0.1:5000/builds:nightly"


@dataclass(frozen=True, kw_only=True)
class OciRef:
    """A repository in a registry, with the tag or digest asked for (neither: the caller
    picks the tag)."""

    registry: str  # host[:port], as the user wrote it (IPv6 in brackets)
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def host(self) -> str:
        """The host without the port (an IPv6 address without its brackets)."""
        host = self.registry.rsplit(":", 1)[0] if not self.registry.endswith("]") else self.registry
        return host.strip("[]")

    @property
    def loopback(self) -> bool:
        """A registry on this machine: spoken to over plain HTTP, without proxies."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def base_url(self) -> str:
        return f"{'http' if self.loopback else 'https'}://{self.registry}/v2/{self.repository}"

    def with_tag(self, tag: str) -> "OciRef":
        return OciRef(registry=self.registry, repository=self.repository, tag=tag)

    def at(self, digest: str) -> "OciRef":
        return OciRef(registry=self.registry, repository=self.repository, tag=self.tag, digest=digest)

    def __str__(self) -> str:
        where = f"{SCHEME}{self.registry}/{self.repository}"
        return where + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def parse_ref(text: str, flag: str) -> OciRef:
    """The reference ``flag`` gave, checked whole; ConfigError naming what is wrong."""
    def bad(why: str) -> ConfigError:
        return ConfigError(f"{flag} {text!r}: {why}", hint=f"write oci://REGISTRY/REPOSITORY[:TAG]; {_EXAMPLE}")

    if not text.startswith(SCHEME):
        raise bad("not an oci:// reference")
    rest = text[len(SCHEME):]
    registry, _, path = rest.partition("/")
    if "@" in registry:
        raise ConfigError(f"{flag}: credentials in the reference are refused (they would be seen in process lists "
                          "and logs)", hint=f"set {USER_VARIABLE} and {PASSWORD_VARIABLE}, or log in with "
                                            "'docker login' / 'oras login'")
    if not _registry_ok(registry):
        raise bad("the registry is not a host name or address with an optional port")
    digest = tag = None
    if "@" in path:
        path, _, digest = path.partition("@")
        if not DIGEST.fullmatch(digest):
            raise bad("a digest is sha256: and 64 lower-case hex digits")
    if ":" in path.rsplit("/", 1)[-1]:
        path, _, tag = path.rpartition(":")
        if not TAG.fullmatch(tag):
            raise bad("a tag is up to 128 letters, digits, '_', '.' and '-', not starting with '.' or '-'")
    if len(path) > 255 or not REPOSITORY.fullmatch(path):
        raise bad("the repository is lower-case letters and digits in '/'-separated parts (separators . _ __ -)")
    return OciRef(registry=registry, repository=path, tag=tag, digest=digest)


def _registry_ok(registry: str) -> bool:
    m = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[^:\[\]]+)(?::(\d{1,5}))?", registry)
    if m is None or (m.group(2) is not None and not 0 < int(m.group(2)) < 65536):
        return False
    host = m.group(1)
    if host.startswith("["):
        try:
            return ipaddress.ip_address(host[1:-1]).version == 6
        except ValueError:
            return False
    return len(host) <= 253 and _HOST.fullmatch(host) is not None


def tag_part(text: str) -> str:
    """``text`` made fit for a tag: each run of other characters one '-'. Pure."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).lstrip(".-") or "build"


# --------------------------------------------------------------------------- credentials


@dataclass(frozen=True)
class Credentials:
    """A user name and a secret, and where they came from (said in messages; the secret never)."""

    username: str
    secret: str
    origin: str

    def __repr__(self) -> str:  # never the secret, even in a traceback
        return f"Credentials(username={self.username!r}, origin={self.origin!r})"


def config_files(environ: Mapping[str, str]) -> list[Path]:
    """The docker-format configuration files, in the order they are read."""
    files = []
    if environ.get("REGISTRY_AUTH_FILE"):
        files.append(Path(environ["REGISTRY_AUTH_FILE"]))
    if environ.get("DOCKER_CONFIG"):
        files.append(Path(environ["DOCKER_CONFIG"]) / "config.json")
    home = environ.get("HOME") or os.path.expanduser("~")
    files.append(Path(home) / ".docker" / "config.json")
    return list(dict.fromkeys(files))


def credentials_for(registry: str, environ: Mapping[str, str]) -> Credentials | None:
    """The credentials for ``registry`` (host[:port]): the environment first, then the first
    configuration file with an entry for it; None when there are none."""
    user, secret = environ.get(USER_VARIABLE), environ.get(PASSWORD_VARIABLE)
    if user and secret:
        return Credentials(user, secret, f"${USER_VARIABLE} and ${PASSWORD_VARIABLE}")
    for path in config_files(environ):
        found = _from_config(path, registry)
        if found is not None:
            return found
    return None


def _from_config(path: Path, registry: str) -> Credentials | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None  # absent or unreadable: as if it had no entry (doctor says which it read)
    auths = doc.get("auths") if isinstance(doc, dict) else None
    if not isinstance(auths, dict):
        return None
    for key in (registry, f"https://{registry}", f"http://{registry}", f"https://{registry}/v2/"):
        entry = auths.get(key)
        if isinstance(entry, dict):
            return _entry_credentials(entry, f"{path} (auths[{key}])")
    return None


def _entry_credentials(entry: Mapping[str, object], origin: str) -> Credentials | None:
    if isinstance(entry.get("username"), str) and isinstance(entry.get("password"), str):
        return Credentials(str(entry["username"]), str(entry["password"]), origin)
    auth = entry.get("auth")
    if not isinstance(auth, str) or not auth:
        return None
    try:
        user, sep, secret = base64.b64decode(auth, validate=True).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return Credentials(user, secret, origin) if sep and user else None
