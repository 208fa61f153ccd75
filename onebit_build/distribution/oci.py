"""A client of the OCI distribution API, as much of it as a binary cache needs: resolve a tag to
a digest, read a manifest and blobs by digest, upload blobs and put a manifest.

Every byte read is checked against the digest it was asked by: a manifest is hashed whole,
a blob is hashed while it is written, no byte past the size expected of it is ever written
(its caller gives that size: the committed reference's, or the manifest's within a cap), and
it has a deadline of its own for the whole of it, not only for each read. The
registry's own ``Docker-Content-Digest`` is only a hint, never trusted over the hash. A
registry that does not answer (refused, timed out, a 5xx or 429) raises
:class:`RegistryUnreachable`, so that a build can go on without it; a refused login, a
malformed answer and a wrong digest are errors of their own. Authentication follows the
registry's challenge: HTTP Basic, or a bearer token from the realm it names, with the
credentials of :mod:`onebit_build.distribution.oci_ref`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping
from urllib.parse import urlencode, urljoin, urlsplit

from onebit_build.distribution.oci_ref import DIGEST, OciRef, credentials_for
from onebit_build.core.errors import FetchError, IntegrityError, SpaceError, is_disk_full

if TYPE_CHECKING:  # requests is imported when a registry is spoken to: not at every start
    import requests

MANIFEST_MEDIA = "application/vnd.oci.image.manifest.v1+json"
MAX_MANIFEST = 4 << 20  # the distribution specification's limit for a manifest
_CHUNK = 1 << 16
TIMEOUT = (5.0, 120.0)  # connect, read (seconds)
DEADLINE_BASE_S = 60.0  # a blob's whole deadline: this, plus its size at the slowest rate taken
SLOWEST_RATE = 256 << 10  # bytes a second
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


class RegistryUnreachable(FetchError):
    """The registry did not answer, or answered that it cannot serve now (5xx, 429)."""


def blob_deadline(size: int) -> float:
    """Seconds a blob of ``size`` bytes may take, all of it: a minute, plus its size at 256 KiB/s. Pure."""
    return DEADLINE_BASE_S + size / SLOWEST_RATE


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Registry:
    """One repository of one registry, spoken to over one session."""

    def __init__(self, ref: OciRef, *, environ: Mapping[str, str] | None = None, push: bool = False):
        import requests

        self.ref = ref
        self.push = push
        self._creds = credentials_for(ref.registry, os.environ if environ is None else environ)
        self._auth: dict[str, str] = {}
        self._session = requests.Session()
        if ref.loopback:  # no proxy and no .netrc for a registry on this machine
            self._session.trust_env = False

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> "Registry":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------- reading

    def ping(self) -> str:
        """The API version the registry answers ``/v2/`` with (after logging in where it asks)."""
        base = self.ref.base_url.rsplit("/v2/", 1)[0]
        r = self._request("GET", f"{base}/v2/", "the API root", absolute=True, expect=(200,))
        r.close()
        return r.headers.get("Docker-Distribution-Api-Version", "no version named")[:40]

    def resolve(self, tag: str) -> str | None:
        """The digest the tag names now; None when the repository has no such tag."""
        r = self._request("HEAD", f"manifests/{tag}", f"the tag {tag}", headers={"Accept": MANIFEST_MEDIA})
        if r.status_code == 404:
            return None
        given = r.headers.get("Docker-Content-Digest", "")
        if DIGEST.fullmatch(given):
            return given
        r = self._request("GET", f"manifests/{tag}", f"the tag {tag}", headers={"Accept": MANIFEST_MEDIA},
                          stream=True)
        return None if r.status_code == 404 else sha256_digest(self._read_capped(r, MAX_MANIFEST, f"tag {tag}"))

    def manifest(self, digest: str) -> bytes | None:
        """The manifest stored under ``digest``, its hash checked; None when it is not there."""
        r = self._request("GET", f"manifests/{digest}", "the manifest", headers={"Accept": MANIFEST_MEDIA},
                          stream=True)
        if r.status_code == 404:
            return None
        body = self._read_capped(r, MAX_MANIFEST, f"manifest {digest}")
        if sha256_digest(body) != digest:
            raise IntegrityError(f"{self.ref.at(digest)}: the registry served a manifest whose sha256 is "
                                 f"{sha256_digest(body)[7:23]}..., not the digest asked for",
                                 hint="the registry's storage is damaged or tampered with; publish the build again")
        return body

    def download(self, digest: str, size: int, dest: Path, progress: Callable[[int], None] | None = None, *,
                 name: str = "", deadline: float | None = None) -> None:
        """Blob ``digest`` (``size`` bytes, ``name`` in messages) into the new file ``dest``,
        hashed while written. No more than ``size`` bytes are ever written: an answer announced
        longer is refused before a byte is read, and a body that runs past ``size`` is cut off
        there and refused (IntegrityError, ``dest`` removed). The whole blob must arrive within
        ``deadline`` seconds (:func:`blob_deadline` of its size), or RegistryUnreachable says so."""
        name = name or dest.name
        limit = blob_deadline(size) if deadline is None else deadline
        t0 = time.monotonic()
        r = self._request("GET", f"blobs/{digest}", f"blob {digest[:19]}", stream=True,
                          headers={"Accept-Encoding": "identity"}, read_timeout=min(TIMEOUT[1], limit))
        if r.status_code == 404:
            r.close()
            raise IntegrityError(f"{self.ref}: blob {digest} is missing from the registry",
                                 hint="publish the build again")
        announced = r.headers.get("Content-Length", "")
        if announced.isdigit() and int(announced) > size:
            r.close()
            raise self._too_long(digest, name, size, f"announced {int(announced)} bytes")
        try:
            got, hexd = self._write(r, dest, digest, name, size, (t0, limit), progress)
        except (IntegrityError, RegistryUnreachable):
            dest.unlink(missing_ok=True)
            raise
        except OSError as exc:
            dest.unlink(missing_ok=True)
            if is_disk_full(exc):
                raise SpaceError(f"no space left on device at {dest.parent} while pulling {self.ref}",
                                 hint="free some space there and run it again") from None
            raise
        except self._errors() as exc:
            dest.unlink(missing_ok=True)
            raise RegistryUnreachable(f"{self.ref.registry}: the connection broke while reading blob "
                                      f"{digest[:19]} ({type(exc).__name__})", hint="run it again") from None
        finally:
            r.close()
        if got != size or f"sha256:{hexd}" != digest:
            dest.unlink(missing_ok=True)
            found = f"{got} bytes" if got != size else f"sha256 {hexd[:16]}..."
            raise IntegrityError(f"{self.ref}: blob {digest[:19]}... for {name} is not the one the manifest "
                                 f"names ({found}; expected {size} bytes, {digest[7:23]}...)",
                                 hint="the registry's storage is damaged or tampered with; nothing was switched in")

    def _write(self, r: "requests.Response", dest: Path, digest: str, name: str, size: int,
               deadline: tuple[float, float], progress: Callable[[int], None] | None) -> tuple[int, str]:
        """The body into the new file ``dest``, one read of the socket at a time, until ``size``
        bytes are passed (refused) or ``deadline`` (start, seconds) is; (bytes, sha256 hex)."""
        h, got, (start, limit) = hashlib.sha256(), 0, deadline
        with open(dest, "xb") as f:
            while block := r.raw.read1(_CHUNK, decode_content=False):  # the bytes as sent, each read returned
                got += len(block)
                if got > size:
                    raise self._too_long(digest, name, size, "sent more; cut off there")
                if time.monotonic() - start > limit:
                    raise RegistryUnreachable(
                        f"{self.ref.registry}: blob {digest[:19]}... for {name} did not arrive within "
                        f"{round(limit, 1):g} s ({got} of {size} bytes)",
                        hint="the registry is too slow or stalls; run it again later, or build here without the "
                             "binary cache")
                h.update(block)
                f.write(block)
                if progress is not None:
                    progress(len(block))
        return got, h.hexdigest()

    def _too_long(self, digest: str, name: str, size: int, what: str) -> IntegrityError:
        return IntegrityError(f"{self.ref}: blob {digest[:19]}... for {name} is longer than the {size} bytes "
                              f"expected ({what})",
                              hint="the registry's storage is damaged or tampered with; nothing was switched in")

    def has_blob(self, digest: str) -> bool:
        return self._request("HEAD", f"blobs/{digest}", f"blob {digest[:19]}").status_code == 200

    # ----------------------------------------------------------------------- writing

    def upload(self, digest: str, size: int, body: Callable[[], Any]) -> None:
        """Upload one blob monolithically (``body()`` gives its bytes or an open file)."""
        r = self._request("POST", "blobs/uploads/", "an upload", expect=(202,))
        location = r.headers.get("Location", "")
        if not location:
            raise FetchError(f"{self.ref.registry}: the upload answer names no Location",
                             hint="use a registry that follows the OCI distribution specification")
        url = urljoin(self.ref.base_url + "/", location)
        if urlsplit(url).netloc != urlsplit(self.ref.base_url).netloc:
            raise FetchError(f"{self.ref.registry}: the upload was sent to another host ({urlsplit(url).netloc})",
                             hint="use a registry that takes uploads itself")
        url += ("&" if "?" in url else "?") + urlencode({"digest": digest})
        self._request("PUT", url, f"blob {digest[:19]}", absolute=True, expect=(201,), body=body,
                      headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)})

    def put_manifest(self, tag: str, body: bytes) -> str:
        """Store the manifest under ``tag``; returns its digest."""
        digest = sha256_digest(body)
        r = self._request("PUT", f"manifests/{tag}", f"the manifest for {tag}", expect=(201,),
                          body=lambda: body, headers={"Content-Type": MANIFEST_MEDIA})
        given = r.headers.get("Docker-Content-Digest")
        if given and given != digest:
            raise IntegrityError(f"{self.ref.registry} stored the manifest as {given}, not {digest}",
                                 hint="the registry changed the manifest; use one that stores it as sent")
        return digest

    # ----------------------------------------------------------------------- the exchange

    def _errors(self) -> tuple[type[BaseException], ...]:
        import requests
        import urllib3

        return (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError,
                urllib3.exceptions.HTTPError)  # a blob is read from the raw stream: urllib3's own errors

    def _request(self, method: str, path: str, what: str, *, headers: Mapping[str, str] | None = None,
                 body: Callable[[], Any] | None = None, stream: bool = False, absolute: bool = False,
                 expect: tuple[int, ...] = (200, 404), read_timeout: float = TIMEOUT[1]) -> "requests.Response":
        url = path if absolute else f"{self.ref.base_url}/{path}"
        for attempt in (1, 2):
            try:
                r = self._session.request(method, url, headers={**(headers or {}), **self._auth},
                                          data=body() if body else None, stream=stream,
                                          timeout=(TIMEOUT[0], read_timeout))
            except self._errors() as exc:
                raise RegistryUnreachable(f"registry {self.ref.registry} did not answer ({_reason(exc)})",
                                          hint="check that it runs and is reachable") from None
            if r.status_code == 401 and attempt == 1:
                r.close()
                self._authenticate(r.headers.get("WWW-Authenticate", ""))
                continue
            break
        if r.status_code in expect:
            return r
        code = _error_code(r) if method != "HEAD" else ""
        r.close()
        raise self._failure(r.status_code, method, what, code)

    def _failure(self, status: int, method: str, what: str, code: str = "") -> FetchError:
        if status >= 500 or status == 429:
            return RegistryUnreachable(f"registry {self.ref.registry} cannot serve now (HTTP {status})",
                                       hint="try again later")
        if status in (401, 403):
            origin = self._creds.origin if self._creds else "no credentials found"
            return FetchError(f"registry {self.ref.registry} refused {method} of {what} in {self.ref.repository} "
                              f"(HTTP {status}; credentials: {origin})",
                              hint="log in with 'docker login' or 'oras login', or set ONEBIT_OCI_USERNAME and "
                                   "ONEBIT_OCI_PASSWORD, with rights to "
                                   + ("push" if self.push else "pull") + " there")
        return FetchError(f"registry {self.ref.registry}: {method} of {what} answered HTTP {status}{code}",
                          hint="check the reference; see the registry's log")

    def _authenticate(self, challenge: str) -> None:
        """Answer a 401: Basic with the credentials, or a bearer token from the realm named."""
        scheme = challenge.split(" ", 1)[0].lower()
        params = dict(_CHALLENGE.findall(challenge))
        if scheme == "basic":
            if self._creds is None:
                return  # the retry fails with 401 and says how to log in
            pair = f"{self._creds.username}:{self._creds.secret}".encode()
            self._auth = {"Authorization": "Basic " + base64.b64encode(pair).decode()}
        elif scheme == "bearer" and params.get("realm"):
            self._auth = {"Authorization": f"Bearer {self._token(params)}"}

    def _token(self, params: Mapping[str, str]) -> str:
        realm = params["realm"]
        if urlsplit(realm).scheme != "https" and not (self.ref.loopback and urlsplit(realm).scheme == "http"):
            raise FetchError(f"registry {self.ref.registry} names a token service that is not https ({realm})",
                             hint="use a registry whose token service is served over https")
        scope = f"repository:{self.ref.repository}:{'pull,push' if self.push else 'pull'}"
        query = {"service": params.get("service", ""), "scope": scope}
        auth = (self._creds.username, self._creds.secret) if self._creds else None
        try:
            r = self._session.get(realm, params=query, auth=auth, timeout=TIMEOUT)
        except self._errors() as exc:
            raise RegistryUnreachable(f"the token service of {self.ref.registry} did not answer ({_reason(exc)})",
                                      hint="check that it runs and is reachable") from None
        try:
            doc = r.json() if r.status_code == 200 else {}
        except ValueError:
            doc = {}
        token = doc.get("token") or doc.get("access_token") if isinstance(doc, dict) else None
        if not isinstance(token, str) or not token:
            raise self._failure(r.status_code if r.status_code != 200 else 401, "GET", "a token")
        return token

    def _read_capped(self, r: "requests.Response", cap: int, what: str) -> bytes:
        data = bytearray()
        try:
            for block in r.iter_content(_CHUNK):
                data += block
                if len(data) > cap:
                    raise FetchError(f"{self.ref}: {what} is larger than {cap} bytes",
                                     hint="this is not a build published by onebit-build")
        except self._errors() as exc:
            raise RegistryUnreachable(f"{self.ref.registry}: the connection broke while reading {what} "
                                      f"({type(exc).__name__})", hint="run it again") from None
        finally:
            r.close()
        return bytes(data)


def _reason(exc: BaseException) -> str:
    text = str(exc)
    for short in ("Connection refused", "timed out", "Name or service not known", "No route to host"):
        if short in text:
            return short.lower()
    return type(exc).__name__


def _error_code(r: "requests.Response") -> str:
    """``: MANIFEST_INVALID`` from a distribution error body (codes only: no free text)."""
    try:
        errors = json.loads(next(r.iter_content(4096), b"")).get("errors") or []
        code = str(errors[0].get("code", ""))
    except (ValueError, AttributeError, IndexError, TypeError, OSError):
        return ""
    return f": {code}" if re.fullmatch(r"[A-Z_]{1,40}", code) else ""
