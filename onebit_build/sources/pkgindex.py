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
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping
from urllib.parse import unquote, urlsplit

from packaging.utils import (InvalidSdistFilename, InvalidWheelFilename, canonicalize_name, parse_sdist_filename,
                             parse_wheel_filename)
from packaging.version import InvalidVersion

from onebit_build.core import proc, ui
from onebit_build.core.errors import CommandError, FetchError, IntegrityError, SpaceError, is_disk_full
from onebit_build.core.names import public_url

if TYPE_CHECKING:  # requests is imported where a command goes to the network: not at every start
    import requests


def _pip_default_index() -> str:
    """pip's own default index (what pip uses when nothing is configured)."""
    try:
        # pip's internals, imported only when nothing is configured: pip may move or drop them.
        from pip._internal.models.index import PyPI

        return str(PyPI.simple_url).rstrip("/")
    except Exception:  # pip moved it: the user must then configure an index explicitly
        return ""


DEFAULT_INDEX = _pip_default_index()
# Small enough that a broken connection loses little: urllib3 drops a block it could not finish.
_CHUNK = 1 << 16
# Retries of a request the index did not answer (or answered 429/5xx), and resumes of one
# download whose connection broke in mid-file.
_RETRIES, _RESUMES = 3, 5


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
        done = proc.run([sys.executable, "-m", "pip", "config", "list"], log=log, capture=True, check=False,
                        what="pip config list")
        text = done.output if done.returncode == 0 else ""
    except CommandError:
        text = ""
    return index_config_from(parse_pip_config(text), env)


# --------------------------------------------------------------------------- matching


def sdist_matches(filename: str, name: str, version: str) -> bool:
    """Whether ``filename`` is the sdist of ``name==version``. Pure."""
    try:
        got_name, got_version = parse_sdist_filename(filename)
    except (InvalidSdistFilename, InvalidVersion):
        return False
    return got_name == canonicalize_name(name) and str(got_version) == version


def wheel_matches(filename: str, name: str, version: str) -> bool:
    """Whether ``filename`` is a pure-Python wheel of ``name==version``. Pure."""
    try:
        got_name, got_version, _, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return False
    pure = all(t.abi == "none" and t.platform == "any" for t in tags)
    return pure and got_name == canonicalize_name(name) and str(got_version) == version


def _candidates(page) -> list[Candidate]:
    """The files of a project page that pypi-simple parsed (PEP 503 HTML or PEP 691 JSON)."""
    return [Candidate(filename=p.filename, url=p.url, sha256=p.digests.get("sha256")) for p in page.packages]


def candidates_from_html(html: str, base_url: str) -> list[Candidate]:
    """Every link of a simple-index (or find-links) page, with the hash its fragment gives. Pure."""
    from pypi_simple import ProjectPage  # only a fetch parses index pages

    return _candidates(ProjectPage.from_html("", html, base_url))


# --------------------------------------------------------------------------- I/O


def _session(cfg: IndexConfig) -> requests.Session:
    """A session with pip's certificates and proxy that retries what a busy index answers
    (connection failures, 429 and 5xx) with a growing pause, honouring Retry-After."""
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry
    s = requests.Session()
    retry = Retry(total=_RETRIES, connect=_RETRIES, read=_RETRIES, status=_RETRIES, backoff_factor=0.5,
                  status_forcelist=(429, 500, 502, 503, 504), allowed_methods=frozenset({"GET"}),
                  raise_on_status=False)
    for scheme in ("https://", "http://"):
        s.mount(scheme, HTTPAdapter(max_retries=retry))
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


def _list_local(page: Path) -> list[Candidate]:
    """A find-links folder (its files, or its index.html) or a local simple-index page."""
    if page.is_dir() and (page / "index.html").is_file():
        return candidates_from_html((page / "index.html").read_text(errors="replace"), page.as_uri() + "/index.html")
    if page.is_dir():
        return [Candidate(filename=p.name, url=str(p), sha256=None) for p in sorted(page.iterdir()) if p.is_file()]
    if page.is_file() and page.suffix in (".html", ".htm"):
        return candidates_from_html(page.read_text(errors="replace"), page.as_uri())
    return []


def _list_location(location: str, project: str, session: requests.Session, cfg: IndexConfig,
                   is_index: bool) -> list[Candidate]:
    local = _local_path(location)
    if local is not None:
        return _list_local(local / canonicalize_name(project) if is_index else local)
    # pypi-simple, imported here: only an index page needs it, and it takes a while to import.
    from pypi_simple import NoSuchProjectError, ProjectPage, PyPISimple, UnsupportedRepoVersionError

    if not is_index:  # a find-links URL: one HTML page of links
        resp = session.get(location, timeout=cfg.timeout_s)
        resp.raise_for_status()
        return _candidates(ProjectPage.from_html(project, resp.text, resp.url))
    try:
        return _candidates(PyPISimple(location, session=session).get_project_page(project, timeout=cfg.timeout_s))
    except NoSuchProjectError:
        return []
    except UnsupportedRepoVersionError as exc:  # a newer API than this reads: a problem of this location
        raise ValueError(str(exc)) from None


def find_file(cfg: IndexConfig, project: str, version: str, match: Callable[[str, str, str], bool], *,
              session: requests.Session | None = None) -> tuple[list[Candidate], list[str]]:
    """The matching files in every configured location, in order, and what went wrong where."""
    import requests
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


def _space_error(where: Path, need_bytes: int | None) -> SpaceError:
    need = f" (needs about {need_bytes / 1e6:.0f} MB)" if need_bytes else ""
    return SpaceError(f"no space left on device at {where}{need}",
                      hint="free some space or use another --workspace; nothing half-written was kept")


class _Part:
    """The ``.part`` file a download streams into, hashed as the bytes arrive."""

    def __init__(self, path: Path, progress: ByteProgress):
        self.path, self.progress = path, progress
        self.file = None
        self.hash = hashlib.sha256()
        self.written = 0
        self.total: int | None = None

    def open(self) -> None:
        self.file = open(self.path, "wb")

    def add(self, block: bytes) -> None:
        self.file.write(block)
        self.hash.update(block)
        self.written += len(block)
        self.progress.update(self.written, self.total)

    def restart(self) -> None:
        """Back to an empty file (the server sent the whole file, not the rest asked for)."""
        self.file.seek(0)
        self.file.truncate()
        self.hash, self.written = hashlib.sha256(), 0

    def finish(self) -> str:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        return self.hash.hexdigest()

    def discard(self) -> None:
        if self.file is not None:
            self.file.close()
        self.path.unlink(missing_ok=True)


def _copy_local(src: Path, part: _Part) -> None:
    part.total = src.stat().st_size
    with open(src, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            part.add(block)


def _stream(url: str, part: _Part, session: requests.Session, timeout_s: float, label: str) -> None:
    """GET ``url`` into ``part``; a connection lost in mid-file is resumed with a Range
    request from the bytes already hashed (the adapter's retries cover only the start)."""
    import requests
    for resumes_left in range(_RESUMES, -1, -1):
        have = part.written
        headers = {"Accept-Encoding": "identity", **({"Range": f"bytes={have}-"} if have else {})}
        try:
            with session.get(url, stream=True, timeout=timeout_s, headers=headers) as resp:
                resp.raise_for_status()
                if have and resp.status_code != 206:
                    part.restart()
                length = resp.headers.get("Content-Length", "")
                part.total = part.written + int(length) if length.isdigit() else None
                for block in resp.iter_content(_CHUNK):
                    part.add(block)
            return
        except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
            if not resumes_left or part.written == have:
                raise
            ui.warn(f"{label}: connection lost after {part.written / 1e6:.1f} MB ({type(exc).__name__}); resuming")


def download(cand: Candidate, dest: Path, *, want_sha256: str, cfg: IndexConfig, label: str,
             session: requests.Session | None = None) -> Path:
    """Stream ``cand`` to ``dest``, checking the sha256 before the file gets its name.

    Raises IntegrityError (the bytes are not the pinned ones; nothing is kept), SpaceError
    (disk full; the partial file is removed) or FetchError (transfer failed)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".part")
    progress = ByteProgress(label)
    part = _Part(partial, progress)
    try:
        part.open()
        local = _local_path(cand.url)
        if local is not None:
            _copy_local(local, part)
        else:
            _stream(cand.url, part, session or _session(cfg), cfg.timeout_s, label)
        got = part.finish()
    except OSError as exc:
        part.discard()
        raise _transfer_error(exc, cand, part) from None
    except BaseException:
        part.discard()
        raise
    finally:
        progress.close(part.written)
    if got != want_sha256:
        partial.unlink(missing_ok=True)
        raise IntegrityError(
            f"{cand.filename}: sha256 {got} is not the pinned {want_sha256}; nothing was unpacked or run "
            "and the file was removed",
            hint=f"the index served other bytes than pinned ({public_url(cand.url)}): do not trust it; check the pin",
        )
    os.replace(partial, dest)
    return dest


def _transfer_error(exc: OSError, cand: Candidate, part: _Part) -> Exception:
    """The typed error for a failed transfer (requests' errors are OSErrors too)."""
    import requests
    label = part.progress.label
    if is_disk_full(exc):
        return _space_error(part.path.parent, part.total)
    if isinstance(exc, requests.RequestException):
        return FetchError(f"{label}: download from {public_url(cand.url)} failed: {public_url(str(exc))}",
                          hint="check the network or the index settings of pip")
    return FetchError(f"{label}: cannot write {part.path}: {exc.strerror or exc}",
                      hint="check the permissions of the workspace")


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
            hint=f"the index ({public_url(c.url)}) offers other bytes than pinned: do not trust it; check the pin",
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

