"""The shader cache launcher's stores over HTTP: an S3-compatible bucket (requests signed with
AWS Signature Version 4) and a WebDAV folder (basic or bearer authentication), with no client
library. Written beside the launcher (``glslc.py``) into a build folder as its own module, and
imported there only by builds whose compiler cache is on one of these backends; the standard
library only. Every failure is an OSError (the launcher then compiles with glslc, and the rest
of the build skips the store)."""

from __future__ import annotations

import hashlib
import hmac
import http.client
import ssl
import time
from urllib.parse import quote, urlsplit

TIMEOUT_S = 5.0
MAX_ENTRY_BYTES = 64 << 20  # an entry is one shader's SPIR-V: far below this
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def request(method: str, url: str, headers: dict, body: bytes | None = None) -> tuple[int, bytes]:
    """One request on a connection of its own: (status, body); OSError for any failure."""
    parts = urlsplit(url)
    try:
        if parts.scheme == "https":
            conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=TIMEOUT_S,
                                               context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=TIMEOUT_S)
        try:
            conn.request(method, (parts.path or "/") + (f"?{parts.query}" if parts.query else ""), body=body,
                         headers=headers)
            answer = conn.getresponse()
            data = answer.read(MAX_ENTRY_BYTES + 1)
        finally:
            conn.close()
    except http.client.HTTPException as exc:
        raise OSError(f"{type(exc).__name__}: {exc}") from None
    if len(data) > MAX_ENTRY_BYTES:
        raise OSError("the answer is larger than any entry")
    return answer.status, data


def _host(url: str) -> str:
    parts = urlsplit(url)
    default = 443 if parts.scheme == "https" else 80
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
    return host if parts.port in (None, default) else f"{host}:{parts.port}"


def _fail(what: str, status: int, body: bytes) -> OSError:
    return OSError(f"{what} answered HTTP {status} {body[:80].decode('utf-8', 'replace').strip()}")


class S3Store:
    """GET and PUT of objects in one bucket. ``conf``: ``base`` (the bucket's URL, path style or
    virtual host), ``region``, ``prefix``, and ``access_key`` / ``secret_key`` / ``session_token``
    (none: anonymous, read only)."""

    def __init__(self, conf: dict, *, prefix: str):
        self.conf = conf
        self.prefix = conf.get("prefix", "") + prefix

    def _url(self, key: str) -> str:
        return self.conf["base"].rstrip("/") + "/" + quote(self.prefix + key, safe="/-_.~")

    def _headers(self, method: str, url: str, payload: bytes, now: float | None = None) -> dict:
        c = self.conf
        digest = hashlib.sha256(payload).hexdigest() if payload else EMPTY_SHA256
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        headers = {"host": _host(url), "x-amz-content-sha256": digest, "x-amz-date": stamp}
        if not c.get("access_key"):
            return headers
        if c.get("session_token"):
            headers["x-amz-security-token"] = c["session_token"]
        signed = ";".join(sorted(headers))
        canonical = "\n".join([method, urlsplit(url).path or "/", "",
                               "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)), signed, digest])
        scope = f"{stamp[:8]}/{c['region']}/s3/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        key = ("AWS4" + c["secret_key"]).encode()
        for part in (stamp[:8], c["region"], "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={c['access_key']}/{scope}, "
                                    f"SignedHeaders={signed}, Signature={signature}")
        return headers

    def get(self, key: str) -> bytes | None:
        url = self._url(key)
        status, body = request("GET", url, self._headers("GET", url, b""))
        if status == 200:
            return body
        if status == 404 or (status == 403 and not self.conf.get("access_key")):
            return None  # a public bucket answers 403 for what it does not hold
        raise _fail("S3 GET", status, body)

    def put(self, key: str, blob: bytes) -> None:
        if not self.conf.get("access_key"):
            return  # read only without credentials, as sccache's SCCACHE_S3_NO_CREDENTIALS
        url = self._url(key)
        status, body = request("PUT", url, self._headers("PUT", url, blob), blob)
        if status not in (200, 201, 204):
            raise _fail("S3 PUT", status, body)


class WebDavStore:
    """GET and PUT of files under one WebDAV folder, its missing folders made (MKCOL) on the
    first PUT that needs them. ``conf``: ``base``, ``prefix``, and ``username`` / ``password``
    or ``token``."""

    def __init__(self, conf: dict, *, prefix: str):
        self.conf = conf
        self.prefix = conf.get("prefix", "") + prefix

    def _url(self, path: str) -> str:
        return self.conf["base"].rstrip("/") + "/" + quote(path, safe="/-_.~")

    def _headers(self) -> dict:
        c = self.conf
        if c.get("token"):
            return {"Authorization": f"Bearer {c['token']}"}
        if c.get("username") is not None and c.get("password") is not None:
            import base64

            pair = base64.b64encode(f"{c['username']}:{c['password']}".encode()).decode()
            return {"Authorization": f"Basic {pair}"}
        return {}

    def get(self, key: str) -> bytes | None:
        status, body = request("GET", self._url(self.prefix + key), self._headers())
        if status == 200:
            return body
        if status == 404:
            return None
        raise _fail("WebDAV GET", status, body)

    def put(self, key: str, blob: bytes) -> None:
        url = self._url(self.prefix + key)
        status, body = request("PUT", url, self._headers(), blob)
        if status in (404, 409):  # a folder on the way is missing: make each, then again
            folders = (self.prefix + key).split("/")[:-1]
            for n in range(1, len(folders) + 1):
                made, answer = request("MKCOL", self._url("/".join(folders[:n]) + "/"), self._headers())
                if made not in (201, 405):  # 405: it is there already
                    raise _fail("WebDAV MKCOL", made, answer)
            status, body = request("PUT", url, self._headers(), blob)
        if status not in (200, 201, 204):
            raise _fail("WebDAV PUT", status, body)
