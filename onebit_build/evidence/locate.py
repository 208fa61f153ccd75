"""Where ``verify-provenance`` finds a statement and the files its subjects name.

Three layouts are known: a build folder (``build-manifest.json`` beside the statement; each
subject at its path in its component's build folder, the other components' folders beside
this one), an install prefix (the statement in ``share/onebit-build/``, the files in
``bin/``) and any other folder (the files by name beside the statement, as a download of a
release puts them). A name or path in a statement is hostile: one that is not a plain
relative name, or a file whose links lead out of its folder, is refused, never opened.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from onebit_build.distribution.install import MANIFEST_REL
from onebit_build.checking.manifest import MANIFEST_NAME
from onebit_build.core.errors import NotAvailableError
from onebit_build.core.names import plain_name, relative_inside
from onebit_build.evidence.emit import SIGNED, UNSIGNED

BUILD_FOLDER = "build folder"
PREFIX = "install prefix"
FOLDER = "folder"
STATEMENT_NAMES = (SIGNED, UNSIGNED)


@dataclass(frozen=True, kw_only=True)
class LocatedEvidence:
    layout: str  # BUILD_FOLDER, PREFIX or FOLDER
    statement: Path
    root: Path  # the build folder, the prefix, or the folder holding the statement
    workspace: Path | None = None  # a build folder's workspace, when it lies in one (WORKSPACE/build/NAME)

    @property
    def complete(self) -> bool:
        """Every subject must be here (a build folder or a prefix), not only those present."""
        return self.layout != FOLDER


def _statement_in(folder: Path) -> Path | None:
    found = [folder / n for n in STATEMENT_NAMES if (folder / n).is_file()]
    if not found:
        found = sorted(folder.glob("*.intoto.jsonl"))
    return found[0] if found else None


def _layout_of(folder: Path) -> tuple[str, Path]:
    """(layout, root) of a folder holding a statement."""
    if (folder / MANIFEST_NAME).is_file() and (folder / "onebit-build.json").is_file():
        return BUILD_FOLDER, folder
    prefix = folder.parent.parent
    if folder == prefix / MANIFEST_REL.parent and (prefix / "bin").is_dir():
        return PREFIX, prefix
    return FOLDER, folder


def locate(path: Path) -> LocatedEvidence:
    """The statement ``path`` names (a build folder, an install prefix, a folder or the file
    itself) and the layout its subjects are found in."""
    path = path.absolute()
    if path.is_dir():
        folder = path / MANIFEST_REL.parent if (path / MANIFEST_REL).is_file() else path
        statement = _statement_in(folder)
        if statement is None:
            raise NotAvailableError(f"{path} holds no provenance statement ({' or '.join(STATEMENT_NAMES)})",
                                    hint="build it again with this version (install carries the statement into a "
                                         "prefix), or give the statement file")
    elif path.is_file():
        statement, folder = path, path.parent
    else:
        raise NotAvailableError(f"{path}: no such file or folder",
                                hint="give a build folder, an install prefix or a statement file")
    layout, root = _layout_of(folder)
    workspace = root.parent.parent if layout == BUILD_FOLDER and root.parent.name == "build" else None
    return LocatedEvidence(layout=layout, statement=statement, root=root, workspace=workspace)


def subject_file(target: LocatedEvidence, subject: Mapping[str, Any],
                 folders: Mapping[str, str]) -> tuple[Path | None, str]:
    """Where the file a subject names lies in this layout (``folders``: each component's build
    folder name, as the statement records it): (path, "") or (None, why it is refused).
    Nothing outside the target's folders is ever named."""
    name = str(subject.get("name", ""))
    if not plain_name(name) or not relative_inside(name):
        return None, f"its name {name!r} leaves the folder"
    notes = subject.get("annotations") or {}
    if target.layout == PREFIX:
        base, rel = target.root / "bin", name
    elif target.layout == FOLDER:
        base, rel = target.root, name
    else:
        rel = str(notes.get("path") or name)
        if not relative_inside(rel):
            return None, f"its path {rel!r} leaves the build folder"
        base = target.root
        folder = str(folders.get(str(notes.get("component", "")), ""))
        if folder and folder != target.root.name:
            if not plain_name(folder):
                return None, f"its build folder {folder!r} is not a folder name"
            base = target.root.parent / folder
    path = base / rel
    try:
        real = path.resolve()
    except (OSError, RuntimeError):
        return None, "its path cannot be resolved (a loop of links)"
    if real != base.resolve() and base.resolve() not in real.parents:
        return None, f"{path} leads out of its folder (to {real})"
    return path, ""
