"""Every rule for a name or a relative path that comes from a user, a recipe or an archive
and ends up in a file name, a folder name, CMake code or a log name: each rule once, here.

Checks are pure and match the whole text (a trailing newline is not a name). The
``*_part`` functions turn any text into something safe to put in a file name.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

# A name that becomes (part of) a file or folder name: a pinned source, a recipe, a model
# in models.lock, the file a download's URL ends in.
FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# A component or output name: it is also the head of a ``${NAME.FIELD}`` reference, so no '.'.
COMPONENT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
# A CMake variable name as a recipe or ``-D`` may set it: a C identifier.
CMAKE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A FetchContent name (it becomes FETCHCONTENT_SOURCE_DIR_<NAME>).
FETCH_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
# A bench label (``--config NAME=...``, ``--build NAME=...``): a file name that may hold '+'.
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
# A patch file: NNNN-name.patch, applied in NNNN order.
PATCH_FILE = re.compile(r"(\d{4})-[A-Za-z0-9._-]+\.patch")

_NOT_FILE_CHAR = re.compile(r"[^A-Za-z0-9._-]")
_NOT_LABEL_CHARS = re.compile(r"[^A-Za-z0-9._+-]+")


def is_file_name(name: str, *, max_len: int | None = None) -> bool:
    return FILE_NAME.fullmatch(name) is not None and (max_len is None or len(name) <= max_len)


def is_component_name(name: str) -> bool:
    return COMPONENT_NAME.fullmatch(name) is not None


def is_cmake_name(name: str) -> bool:
    return CMAKE_NAME.fullmatch(name) is not None


def is_fetch_name(name: str) -> bool:
    return FETCH_NAME.fullmatch(name) is not None


def is_label(name: str) -> bool:
    return LABEL.fullmatch(name) is not None


def patch_number(file_name: str) -> str | None:
    """The NNNN of a patch file named NNNN-name.patch; None for any other name."""
    m = PATCH_FILE.fullmatch(file_name)
    return m.group(1) if m else None


def file_part(text: str) -> str:
    """``text`` with every character a file name should not hold replaced by '_' (one for one,
    so that different names of the same length stay different)."""
    return _NOT_FILE_CHAR.sub("_", text)


def label_part(text: str) -> str:
    """``text`` for a log or label name: each run of other characters becomes one '_'."""
    return _NOT_LABEL_CHARS.sub("_", text)


def plain_name(name: str) -> bool:
    """True for a file name without any folder part."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name


def relative_inside(rel: str) -> bool:
    """True for a relative path (or glob) that stays inside the folder it is relative to:
    not empty, not absolute, no drive letter, no backslash, no NUL and no '..' part."""
    if not rel or rel.startswith("/") or "\\" in rel or "\0" in rel:
        return False
    first = rel.split("/", 1)[0]
    if len(first) >= 2 and first[1] == ":":  # a drive letter
        return False
    return ".." not in PurePosixPath(rel).parts


def member_problem(name: str, *, link: str | None = None, symlink: bool = False, hardlink: bool = False) -> str | None:
    """Why an archive member (a tar or zip entry) is unsafe to extract, or None. ``link`` is a
    link's target: a symbolic link's relative to the member's folder, a hard link's to the
    archive's top. Pure."""
    if not name:
        return "empty name"
    if name.startswith(("/", "\\")):
        return "absolute path"
    if ".." in PurePosixPath(name).parts:
        return "path with '..'"
    if not relative_inside(name):
        return "backslash, NUL or drive letter in the name"
    if symlink or hardlink:
        if link is None:
            return "link without target"
        target = PurePosixPath(link)
        if target.is_absolute():
            return "link to an absolute path"
        depth = 0
        for part in ((PurePosixPath(name).parent if symlink else PurePosixPath()) / target).parts:
            if part == "..":
                depth -= 1
                if depth < 0:
                    return "link escaping the archive"
            elif part not in (".", ""):
                depth += 1
    return None


_CREDENTIALS = re.compile(r"(://)[^/?#@\s]*@")


def public_url(url: str) -> str:
    """``url`` as it may be shown or recorded: a user name and password in it (``https://user:pw@
    host/...``) replaced by ``***``; any text is taken, a URL or not. Pure."""
    return _CREDENTIALS.sub(r"\1***@", url)
