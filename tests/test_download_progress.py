"""The progress of a download from a package index (the sdist's and the model's streams): a
bar on a terminal, plain lines elsewhere. A real file served over loopback HTTP, fetched by
the real download function, in a real pseudo-terminal."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from _support import REPO, run_in_terminal

CHILD = textwrap.dedent("""\
    import functools, hashlib, http.server, sys, threading
    from pathlib import Path
    from onebit_build.sources import pkgindex

    folder = Path(sys.argv[1])
    blob = folder / "blob-1.0-py3-none-any.whl"
    blob.write_bytes(bytes(range(256)) * 12_000)  # 3,072,000 bytes
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *a: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/{blob.name}"
    cand = pkgindex.Candidate(filename=blob.name, url=url, sha256=None)
    want = hashlib.sha256(blob.read_bytes()).hexdigest()
    pkgindex.download(cand, folder / "got" / blob.name, want_sha256=want, cfg=pkgindex.IndexConfig(), label="blob==1.0")
    httpd.shutdown()
    print("DONE")
""")


def _run(tmp_path: Path, *, terminal: bool) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "100"}
    argv = [sys.executable, "-c", CHILD, str(tmp_path)]
    if not terminal:
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout + out.stderr
    rc, text = run_in_terminal(argv, env, timeout=120)
    assert rc == 0, text
    return text


def test_a_download_on_a_terminal_shows_a_bar(tmp_path):
    text = _run(tmp_path, terminal=True)
    assert "DONE" in text
    assert "\x1b[" in text and "━" in text, text  # rich drew a bar with cursor control
    assert "3.1/3.1 MB" in text, text  # bytes of the total, as the bar shows them
    assert "blob==1.0: 3.1 MB in" in text  # the closing line stays


def test_a_download_elsewhere_prints_plain_lines(tmp_path):
    text = _run(tmp_path, terminal=False)
    assert "DONE" in text and "\x1b[" not in text and "━" not in text
    assert "blob==1.0: 3.1 MB in" in text
