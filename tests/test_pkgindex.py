"""Files from a package index over real HTTP: a local index server answers PEP 691 JSON,
fails now and then the way a busy index does, and breaks a download in mid-file.

The server runs in this process (http.server on 127.0.0.1), so every request the tool makes
is seen and counted; nothing leaves the machine."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from pathlib import Path

import pytest

from onebit_build.sources.pkgindex import IndexConfig, candidates_from_html, fetch_pinned
from onebit_build.core.errors import FetchError, IntegrityError

NAME = "demo_store-1.0.0.tar.gz"
BODY = bytes(range(256)) * 4096  # 1 MiB, every byte position distinguishable


class Index(http.server.BaseHTTPRequestHandler):
    """``/simple/demo-store/`` as PEP 691 JSON, ``/files/NAME`` as the file. The class
    attributes say how to misbehave; ``seen`` records (path, Range header) per request."""

    page_failures = 0  # answer the project page with 503 this many times first
    cut_at: int | None = None  # the first full GET of the file stops after this many bytes
    honour_range = True
    served_sha256 = hashlib.sha256(BODY).hexdigest()
    seen: list[tuple[str, str | None]] = []

    def log_message(self, *args) -> None:  # keep the test output clean
        pass

    def do_GET(self) -> None:
        cls = type(self)
        cls.seen.append((self.path, self.headers.get("Range")))
        if self.path == "/simple/demo-store/":
            self._page(cls)
        elif self.path == f"/files/{NAME}":
            self._file(cls)
        else:
            self.send_error(404)

    def _page(self, cls) -> None:
        if cls.page_failures:
            cls.page_failures -= 1
            self.send_error(503)
            return
        doc = {"meta": {"api-version": "1.0"}, "name": "demo-store",
               "files": [{"filename": NAME, "url": f"../../files/{NAME}", "hashes": {"sha256": cls.served_sha256}}]}
        data = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _file(self, cls) -> None:
        rng = self.headers.get("Range")
        start = int(rng.removeprefix("bytes=").rstrip("-")) if rng and cls.honour_range else 0
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(BODY) - 1}/{len(BODY)}")
        self.send_header("Content-Length", str(len(BODY) - start))
        self.end_headers()
        if cls.cut_at is not None and not rng:
            self.wfile.write(BODY[:cls.cut_at])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(BODY[start:])


@pytest.fixture
def index(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    handler = type("ThisIndex", (Index,), {"seen": []})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield handler, IndexConfig(index_url=f"http://127.0.0.1:{srv.server_port}/simple", timeout_s=10)
    srv.shutdown()
    srv.server_close()


def _fetch(cfg: IndexConfig, dest: Path) -> Path:
    return fetch_pinned("demo-store", "1.0.0", want_sha256=hashlib.sha256(BODY).hexdigest(), dest_dir=dest,
                        kind="sdist", cfg=cfg)


def test_json_page_and_a_busy_index_are_retried(index, tmp_path):
    handler, cfg = index
    handler.page_failures = 2
    got = _fetch(cfg, tmp_path / "dl")
    assert got.read_bytes() == BODY
    pages = [p for p, _ in handler.seen if p.startswith("/simple/")]
    assert len(pages) == 3, handler.seen  # two 503s, then the page


def test_a_download_cut_in_mid_file_is_resumed_with_a_range(index, tmp_path, capsys):
    handler, cfg = index
    handler.cut_at = 300_000
    got = _fetch(cfg, tmp_path / "dl")
    assert got.read_bytes() == BODY
    ranges = [r for p, r in handler.seen if p.startswith("/files/")]
    assert ranges[0] is None and ranges[-1] is not None and int(ranges[-1][6:-1]) > 0, ranges
    assert "resuming" in capsys.readouterr().err
    assert not list((tmp_path / "dl").glob("*.part"))


def test_a_server_that_ignores_the_range_is_read_again_from_the_start(index, tmp_path):
    handler, cfg = index
    handler.cut_at, handler.honour_range = 300_000, False
    got = _fetch(cfg, tmp_path / "dl")
    assert got.read_bytes() == BODY  # the whole file came again; nothing was appended twice


def test_other_bytes_than_pinned_are_refused_before_the_download(index, tmp_path):
    handler, cfg = index
    handler.served_sha256 = "0" * 64
    with pytest.raises(IntegrityError, match="nothing was downloaded"):
        _fetch(cfg, tmp_path / "dl")
    assert not any(p.startswith("/files/") for p, _ in handler.seen)


def test_an_index_that_stays_down_is_one_fetch_error(index, tmp_path):
    handler, cfg = index
    handler.page_failures = 100
    with pytest.raises(FetchError) as e:
        _fetch(cfg, tmp_path / "dl")
    assert "no sdist found" in str(e.value) and "503" in str(e.value)
    assert e.value.exit_code == FetchError("").exit_code


def test_html_page_links_carry_their_hash():
    page = f'<html><body><a href="../../files/{NAME}#sha256={"ab" * 32}">{NAME}</a><a href="x/">x</a></body></html>'
    found = candidates_from_html(page, "https://idx.example.invalid/simple/demo-store/")
    assert found[0].url == f"https://idx.example.invalid/files/{NAME}" and found[0].sha256 == "ab" * 32
