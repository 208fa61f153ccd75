"""A registry that lies, on 127.0.0.1, for the tests of what the client writes and how long it
waits: a real HTTP server (the standard library's) that answers the few requests a pull makes
from manifests and blobs the test gives it, and sends a blob as the test says: padded far past
its size, announced longer than it is, or one byte at a time. It counts the bytes it managed to
send of each blob. Started by the test, stopped by it."""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MANIFEST_MEDIA = "application/vnd.oci.image.manifest.v1+json"


@dataclass
class Blob:
    data: bytes
    pad_to: int = 0  # send zeros after the data up to this many bytes, with no Content-Length
    announce: int = 0  # a Content-Length of this many bytes (then the data, and the connection closed)
    every: float = 0.0  # one byte every this many seconds


@dataclass
class LyingRegistry:
    manifest: bytes
    blobs: dict[str, Blob]
    sent: dict[str, int] = field(default_factory=dict)  # digest -> bytes of its body sent
    requests: list[str] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.manifest).hexdigest()

    def ref(self, repo: str = "tiny") -> str:
        assert self.server is not None
        return f"oci://127.0.0.1:{self.server.server_address[1]}/{repo}"

    def start(self) -> "LyingRegistry":
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def _handler(reg: LyingRegistry):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet
            pass

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def do_GET(self) -> None:
            self._answer(body=True)

        def _answer(self, *, body: bool) -> None:
            reg.requests.append(f"{self.command} {self.path}")
            parts = self.path.split("/")
            if self.path == "/v2/":
                self._send(200, b"{}", body)
            elif len(parts) == 5 and parts[3] == "manifests":
                if parts[4].startswith("sha256:") and parts[4] != reg.digest:
                    self._send(404, b"", body)
                else:
                    self._send(200, reg.manifest, body, {"Content-Type": MANIFEST_MEDIA,
                                                         "Docker-Content-Digest": reg.digest})
            elif len(parts) == 5 and parts[3] == "blobs" and parts[4] in reg.blobs:
                self._blob(parts[4], reg.blobs[parts[4]], body)
            else:
                self._send(404, b"", body)

        def _send(self, status: int, data: bytes, body: bool, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for k, v in {"Content-Length": str(len(data)), **(headers or {})}.items():
                self.send_header(k, v)
            self.end_headers()
            if body:
                self.wfile.write(data)

        def _blob(self, digest: str, blob: Blob, body: bool) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            if blob.announce:
                self.send_header("Content-Length", str(blob.announce))
            elif not blob.pad_to:
                self.send_header("Content-Length", str(len(blob.data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            if not body:
                return
            reg.sent[digest] = 0
            try:
                if blob.every:
                    for i in range(len(blob.data)):
                        self.wfile.write(blob.data[i:i + 1])
                        self.wfile.flush()
                        reg.sent[digest] += 1
                        time.sleep(blob.every)
                    return
                self.wfile.write(blob.data)
                reg.sent[digest] += len(blob.data)
                chunk = bytes(1 << 16)
                while reg.sent[digest] < blob.pad_to:
                    n = min(len(chunk), blob.pad_to - reg.sent[digest])
                    self.wfile.write(chunk[:n])
                    reg.sent[digest] += n
            except OSError:  # the client hung up: what it was sent is counted
                pass

    return Handler
