"""A component's ``downloads``: the archives its CMake code would fetch at configure time
(FetchContent with ``URL`` and ``URL_HASH``), declared in the recipe so that the tool fetches
them itself, checks their sha256 and hands CMake the unpacked tree. Validated at load."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import urlsplit

from onebit_build.core.names import is_fetch_name, is_file_name, public_url, relative_inside
from onebit_build.spec.pins import SHA256_RE
from onebit_build.spec.yamlnode import Node



@dataclass(frozen=True, kw_only=True)
class DownloadSpec:
    """One configure-time download: FetchContent's name for it, the URL and the pinned sha256
    of the archive, and (optionally) the file in the pinned tree that records both."""

    name: str
    url: str
    sha256: str
    lock: str | None = None  # e.g. MODULE.cmake.lock, relative to the component's source tree

    @property
    def file_name(self) -> str:
        """The archive's file name: the URL's last path segment (also its name in a mirror dir)."""
        return PurePosixPath(urlsplit(self.url).path).name

    @property
    def public(self) -> str:
        """The URL as every message, plan and record gives it: without its credentials (the
        real one goes to the download only)."""
        return public_url(self.url)

    @property
    def cmake_variable(self) -> str:
        """The cache variable FetchContent reads instead of downloading."""
        return f"FETCHCONTENT_SOURCE_DIR_{self.name.upper()}"


def load_downloads(node: Node) -> tuple[DownloadSpec, ...]:
    out: list[DownloadSpec] = []
    for i, raw in enumerate(node.get("downloads", list, required=False, default=[])):
        dnode = Node(node.file, node.where(f"downloads[{i}]"), raw)
        dnode.only({"name", "url", "sha256", "lock"})
        name = dnode.get("name", str)
        if not is_fetch_name(name):
            dnode.fail(
                f"name {name!r} is not a FetchContent name",
                "use letters, digits and '_' (e.g. hsa_runtime_headers)",
                key="name",
            )
        if any(d.name.upper() == name.upper() for d in out):
            dnode.fail(f"download {name!r} is declared twice", "declare each FetchContent name once", key="name")
        url = dnode.get("url", str)
        parts = urlsplit(url)
        if (
            parts.scheme != "https"
            or not parts.netloc
            or any(c.isspace() for c in url)
            or parts.query
            or parts.fragment
        ):
            dnode.fail(
                f"url {public_url(url)!r} is not a plain https URL",
                "give the https URL the pinned CMake code downloads", key="url",
            )
        if not is_file_name(PurePosixPath(parts.path).name, max_len=200):
            dnode.fail(f"url {public_url(url)!r} does not end in a file name", "give the URL of the archive itself",
                       key="url")
        sha = dnode.get("sha256", str, fix="copy the sha256 the pinned CMake code checks (URL_HASH)")
        if not SHA256_RE.match(sha):
            dnode.fail(
                f"sha256 {sha!r} is not 64 lower-case hex digits", "copy the pinned URL_HASH SHA256 value", key="sha256"
            )
        lock = dnode.get("lock", str, required=False, default=None)
        if lock is not None and not relative_inside(lock):
            dnode.fail(
                f"lock {lock!r} must be a relative path inside the source tree", "e.g. MODULE.cmake.lock", key="lock"
            )
        out.append(DownloadSpec(name=name, url=url, sha256=sha, lock=lock))
    return tuple(out)
