"""Files from a Python package index, by name, version and sha256, with nothing run.

pip is asked only for its configuration (``pip config list``), so the user's index URL,
extra indexes, find-links folders, proxy and certificates all apply. The file itself is
found on the index's simple pages (or in a find-links folder) and streamed with requests
into a ``.part`` file, hashed while it arrives, and renamed only when its sha256 is the
pinned one. Nothing is unpacked, and no build backend runs, before that check.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import sys
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable, Mapping
from urllib.parse import unquote, urljoin, urlsplit

import requests

from onebit_build.core import proc

from onebit_build.core import ui
from onebit_build.core.errors import CommandError, FetchError, IntegrityError, SpaceError, is_disk_full



def _pip_default_index() -> str:
    """pip's own default index (what pip uses when nothing is configured)."""
    try:
        # pip's internals, imported only when nothing is configured: pip may move or drop them.
        from pip._internal.models.index import PyPI

        return str(PyPI.simple_url).rstrip("/")
    except Exception:  # pip moved it: the user must then configure an index explicitly
        return ""


DEFAULT_INDEX = _pip_default_index()
JSON_SIMPLE = "application/vnd.pypi.simple.v1+json"
_CHUNK = 1 << 20


@dataclass(frozen=True, kw_only=True)
class IndexConfig:
    """The parts of pip's configuration that decide where files come from."""

    index_url: str = DEFAULT_INDEX
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    no_index: bool = False
    cert: str | None = None
    client_cert: str | None = None
    proxy: str | None = None
    timeout_s: float = 60.0

    def locations(self) -> tuple[str, ...]:
        """Where to look, in order: find-links first (local and fast), then the indexes."""
        indexes = () if self.no_index else tuple(u for u in (self.index_url, *self.extra_index_urls) if u)
        return (*self.find_links, *indexes)


@dataclass(frozen=True, kw_only=True)
class Candidate:
    filename: str
    url: str  # http(s) or file URL, or a local path
    sha256: str | None  # what the index says, when it says it


def normalize(name: str) -> str:
    """PEP 503 project-name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


_TRUE = {"1", "true", "yes", "on"}


def parse_pip_config(text: str) -> dict[str, str]:
    """``pip config list`` output -> {key: value}, the most specific scope winning:
    environment variables over the ``download`` section over ``global``. Pure."""
    rank = {":env:": 3, "download": 2, "global": 1}
    best: dict[str, tuple[int, str]] = {}
    for line in text.splitlines():
        m = re.match(r"^([^.=]*)\.([A-Za-z0-9_-]+)=(.*)$", line.strip())
        if not m:
            continue
        scope, key, raw = m.group(1), m.group(2), m.group(3)
        if scope not in rank:
            continue
        try:
            parts = shlex.split(raw)
            value = parts[0] if len(parts) == 1 else " ".join(parts)
        except ValueError:
            value = raw.strip("'\"")
        if key not in best or rank[scope] >= best[key][0]:
            best[key] = (rank[scope], value)
    return {k: v for k, (_, v) in best.items()}


def index_config_from(settings: Mapping[str, str], environ: Mapping[str, str]) -> IndexConfig:
    """Build the index configuration from pip's settings and the PIP_* variables. Pure."""

    def get(key: str) -> str | None:
        env_key = "PIP_" + key.upper().replace("-", "_")
        if environ.get(env_key):
            return environ[env_key]
        return settings.get(key)

    def words(key: str) -> tuple[str, ...]:
        return tuple((get(key) or "").split())

    timeout = get("timeout") or get("default-timeout")
    try:
        timeout_s = float(timeout) if timeout else 60.0
    except ValueError:
        timeout_s = 60.0
    return IndexConfig(
        index_url=(get("index-url") or DEFAULT_INDEX).rstrip("/"),
        extra_index_urls=tuple(u.rstrip("/") for u in words("extra-index-url")),
        find_links=words("find-links"),
        no_index=(get("no-index") or "").lower() in _TRUE,
        cert=get("cert"),
        client_cert=get("client-cert"),
        proxy=get("proxy"),
        timeout_s=timeout_s,
    )


def load_index_config(*, log: Path | None = None, environ: Mapping[str, str] | None = None) -> IndexConfig:
    """Read pip's configuration the way pip itself would see it (no index is contacted)."""
    env = dict(os.environ if environ is None else environ)
    try:
        done = proc.run([sys.executable, "-m", "pip", "config", "list"], log=log, capture=True, check=False, what="pip config list")
        text = done.output if done.returncode == 0 else ""
    except CommandError:
        text = ""
    return index_config_from(parse_pip_config(text), env)


# --------------------------------------------------------------------------- matching


def sdist_matches(filename: str, name: str, version: str) -> bool:
    """Whether ``filename`` is the sdist of ``name==version``. Pure."""
    for ext in (".tar.gz", ".tgz", ".zip"):
        if filename.endswith(ext):
            stem = filename[: -len(ext)]
            dist, sep, ver = stem.rpartition("-")
            return bool(sep) and normalize(dist) == normalize(name) and ver == version
    return False


def wheel_matches(filename: str, name: str, version: str) -> bool:
    """Whether ``filename`` is a pure-Python wheel of ``name==version``. Pure."""
    if not filename.endswith(".whl"):
        return False
    parts = filename[:-4].split("-")
    if len(parts) not in (5, 6):
        return False
    return normalize(parts[0]) == normalize(name) and parts[1] == version and parts[-2] == "none" and parts[-1] == "any"


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text).strip()))
            self._href = None


def candidates_from_html(html: str, base_url: str) -> list[Candidate]:
    """Every link of a simple-index (or find-links) page, with the hash its fragment gives. Pure."""
    parser = _Anchors()
    parser.feed(html)
    out = []
    for href, text in parser.links:
        url, _, fragment = href.partition("#")
        full = urljoin(base_url, url)
        filename = unquote(urlsplit(full).path.rsplit("/", 1)[-1]) or text
        m = re.search(r"sha256=([0-9a-f]{64})", fragment)
        out.append(Candidate(filename=filename, url=full, sha256=m.group(1) if m else None))
    return out


def candidates_from_json(doc: dict, base_url: str) -> list[Candidate]:
    """Every file of a PEP 691 JSON project page. Pure."""
    out = []
    for f in doc.get("files", []):
        if not isinstance(f, dict) or "filename" not in f or "url" not in f:
            continue
        hashes = f.get("hashes") or {}
        out.append(Candidate(filename=f["filename"], url=urljoin(base_url, f["url"]), sha256=hashes.get("sha256")))
    return out


# --------------------------------------------------------------------------- I/O


def _session(cfg: IndexConfig) -> requests.Session:
    s = requests.Session()
    if cfg.cert:
        s.verify = cfg.cert
    if cfg.client_cert:
        s.cert = cfg.client_cert
    if cfg.proxy:
        s.proxies = {"http": cfg.proxy, "https": cfg.proxy}
    s.headers["User-Agent"] = "onebit-build"
    return s


def _local_path(location: str) -> Path | None:
    if location.startswith("file://"):
        return Path(unquote(urlsplit(location).path))
    if "://" not in location:
        return Path(location)
    return None


def _list_location(location: str, project: str, session: requests.Session, cfg: IndexConfig, is_index: bool) -> list[Candidate]:
    local = _local_path(location)
    if local is not None:
        page = local / normalize(project) if is_index else local
        if page.is_dir() and (page / "index.html").is_file():
            return candidates_from_html((page / "index.html").read_text(errors="replace"), page.as_uri() + "/index.html")
        if page.is_dir():
            return [Candidate(filename=p.name, url=str(p), sha256=None) for p in sorted(page.iterdir()) if p.is_file()]
        if page.is_file() and page.suffix in (".html", ".htm"):
            return candidates_from_html(page.read_text(errors="replace"), page.as_uri())
        return []
    url = f"{location}/{normalize(project)}/" if is_index else location
    resp = session.get(url, headers={"Accept": f"{JSON_SIMPLE}, text/html;q=0.1"}, timeout=cfg.timeout_s)
    if resp.status_code == 404:
        return []
    resp.raise_for_status()
    if resp.headers.get("Content-Type", "").startswith(JSON_SIMPLE):
        return candidates_from_json(resp.json(), resp.url)
    return candidates_from_html(resp.text, resp.url)


def find_file(cfg: IndexConfig, project: str, version: str, match: Callable[[str, str, str], bool], *,
              session: requests.Session | None = None) -> tuple[list[Candidate], list[str]]:
    """The matching files in every configured location, in order, and what went wrong where."""
    s = session or _session(cfg)
    found: list[Candidate] = []
    problems: list[str] = []
    for loc in cfg.locations():
        is_index = loc not in cfg.find_links
        try:
            listing = _list_location(loc, project, s, cfg, is_index)
        except (requests.RequestException, OSError, ValueError) as exc:
            problems.append(f"{loc}: {type(exc).__name__}: {exc}")
            continue
        found += [c for c in listing if match(c.filename, project, version)]
    return found, problems


def _space_error(where: Path, need_bytes: int | None, exc: OSError) -> SpaceError:
    need = f" (needs about {need_bytes / 1e6:.0f} MB)" if need_bytes else ""
    return SpaceError(f"no space left on device at {where}{need}", hint="free some space or use another --workspace; nothing half-written was kept")


def download(cand: Candidate, dest: Path, *, want_sha256: str, cfg: IndexConfig, label: str,
             session: requests.Session | None = None) -> Path:
    """Stream ``cand`` to ``dest``, checking the sha256 before the file gets its name.

    Raises IntegrityError (the bytes are not the pinned ones; nothing is kept), SpaceError
    (disk full; the partial file is removed) or FetchError (transfer failed)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    h = hashlib.sha256()
    total: int | None = None
    written = 0
    progress = ByteProgress(label)
    try:
        with open(part, "wb") as out:
            local = _local_path(cand.url)
            if local is not None:
                total = local.stat().st_size
                with open(local, "rb") as src:
                    for block in iter(lambda: src.read(_CHUNK), b""):
                        out.write(block)
                        h.update(block)
                        written += len(block)
                        progress.update(written, total)
            else:
                s = session or _session(cfg)
                with s.get(cand.url, stream=True, timeout=cfg.timeout_s) as resp:
                    resp.raise_for_status()
                    length = resp.headers.get("Content-Length")
                    total = int(length) if length and length.isdigit() else None
                    for block in resp.iter_content(_CHUNK):
                        out.write(block)
                        h.update(block)
                        written += len(block)
                        progress.update(written, total)
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:  # requests' errors are OSErrors too
        part.unlink(missing_ok=True)
        if is_disk_full(exc):
            raise _space_error(dest.parent, total, exc) from None
        if isinstance(exc, requests.RequestException):
            raise FetchError(f"{label}: download from {cand.url} failed: {exc}", hint="check the network or the index settings of pip") from None
        raise FetchError(f"{label}: cannot write {part}: {exc.strerror or exc}", hint="check the permissions of the workspace") from None
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    finally:
        progress.close(written)
    got = h.hexdigest()
    if got != want_sha256:
        part.unlink(missing_ok=True)
        raise IntegrityError(
            f"{cand.filename}: sha256 {got} is not the pinned {want_sha256}; nothing was unpacked or run and the file was removed",
            hint=f"the index served other bytes than pinned ({cand.url}): do not trust it; check the pin",
        )
    os.replace(part, dest)
    return dest


def fetch_pinned(project: str, version: str, *, want_sha256: str, dest_dir: Path, kind: str = "sdist",
                 cfg: IndexConfig | None = None, log: Path | None = None) -> Path:
    """Find ``project==version`` (``kind`` sdist or wheel) in the configured locations and
    download it into ``dest_dir``, sha256-checked. Candidates whose index-given hash is not
    the pinned one are skipped without downloading."""
    cfg = cfg or load_index_config(log=log)
    match = sdist_matches if kind == "sdist" else wheel_matches
    session = _session(cfg)
    found, problems = find_file(cfg, project, version, match, session=session)
    if not found:
        where = "; ".join(cfg.locations()) or "no location configured"
        extra = f"; problems: {'; '.join(problems)}" if problems else ""
        raise FetchError(
            f"{project}=={version}: no {kind} found (looked in: {where}){extra}",
            hint="check access to the package index (pip config list shows what pip uses), or use --mirror-dir",
        )
    wrong = [c for c in found if c.sha256 and c.sha256 != want_sha256]
    usable = [c for c in found if not (c.sha256 and c.sha256 != want_sha256)]
    if not usable:
        c = wrong[0]
        raise IntegrityError(
            f"{c.filename}: the index lists sha256 {c.sha256}, not the pinned {want_sha256}; nothing was downloaded",
            hint=f"the index ({c.url}) offers other bytes than pinned: do not trust it; check the pin",
        )
    last: Exception | None = None
    for cand in usable:
        try:
            return download(cand, dest_dir / cand.filename, want_sha256=want_sha256, cfg=cfg,
                            label=f"{project}=={version}", session=session)
        except (IntegrityError, SpaceError):
            raise
        except FetchError as exc:
            last = exc
            ui.warn(str(exc))
    assert last is not None
    raise last


class ByteProgress:
    """A bar on a terminal (:class:`ui.ByteBar`); elsewhere ``label: 12.3/76.6 MB`` now and then."""

    def __init__(self, label: str, every_s: float = 10.0):
        self.label = label
        self.every_s = every_s
        self.t0 = time.monotonic()
        self.last = 0.0
        self.bar = ui.ByteBar(label) if sys.stderr.isatty() and not ui.is_verbose() else None

    def update(self, done: int, total: int | None) -> None:
        if self.bar is not None:
            self.bar.update(done, total)
            return
        now = time.monotonic()
        if now - self.last < self.every_s:  # not a terminal (a CI log): a line now and then
            return
        self.last = now
        of = f"/{total / 1e6:.1f}" if total else ""
        ui.info(f"  {self.label}: {done / 1e6:.1f}{of} MB")

    def close(self, done: int) -> None:
        if self.bar is not None:
            self.bar.stop()
        secs = time.monotonic() - self.t0
        if done:
            ui.info(f"  {self.label}: {done / 1e6:.1f} MB in {secs:.1f} s")

