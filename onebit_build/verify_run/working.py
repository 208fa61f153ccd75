"""The working build a verification run compares with, from what ``--working PATH`` names.

PATH may be

- a build folder (it holds ``build-manifest.json`` and the llama-server the manifest names);
  a copy of a build folder counts too: its outputs are looked for where the copy is;
- the ``llama-server`` of such a folder (``bin/llama-server``);
- a run folder of onebit-build holding ``build-manifest.json``: the build it names;
- an install prefix made by ``onebit-build install`` (``bin/`` and
  ``share/onebit-build/build-manifest.json``), or its ``bin/llama-server``.

Anything else is refused in one line with the remedy (exit 2), and so is a build of another
recipe. The build's outputs are re-anchored at the folder that was named, so that the
provenance check expects the files the server will actually load from there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onebit_build.checking.manifest import ComponentRecord, Manifest, read_manifest
from onebit_build.core.errors import ConfigError, VerifyError
from onebit_build.core.fsutil import StateError

MANIFEST = "build-manifest.json"
INSTALLED_MANIFEST = Path("share") / "onebit-build" / MANIFEST  # under an install prefix
SERVER = "llama-server"
REMEDY = ("give the working build's folder, its bin/llama-server, an install prefix of 'onebit-build install',"
          " or a run folder of onebit-build that holds build-manifest.json")

BUILD_FOLDER = "build folder"
SERVER_FILE = "llama-server"
RUN_FOLDER = "run folder"
INSTALL_PREFIX = "install prefix"


@dataclass(frozen=True, kw_only=True)
class WorkingOutput:
    name: str
    path: Path  # where the file is for this build (re-anchored)
    sha256: str


@dataclass(frozen=True, kw_only=True)
class ResolvedBuild:
    """A build as a verification run uses it."""

    folder: Path  # the build folder of the component that builds llama-server
    server: Path
    manifest_path: Path
    manifest: Manifest
    given_as: str  # BUILD_FOLDER, SERVER_FILE, RUN_FOLDER or INSTALL_PREFIX
    outputs: tuple[WorkingOutput, ...]  # of every component

    @property
    def recipe(self) -> str:
        return self.manifest.recipe

    @property
    def installed(self) -> bool:
        """An install prefix: it holds the outputs and the manifest, not the build tree."""
        return self.manifest_path.parent.name == "onebit-build" and self.manifest_path.parent.parent.name == "share"

    @property
    def expected_files(self) -> dict[str, str]:
        """Real path -> sha256 of every output, as provenance expects them."""
        return {os.path.realpath(o.path): o.sha256 for o in self.outputs}

    def to_dict(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "server": str(self.server), "manifest": str(self.manifest_path),
                "given_as": self.given_as, "recipe": self.recipe}


def _refuse(path: Path, problem: str, hint: str = REMEDY) -> ConfigError:
    return ConfigError(f"--working {path}: {problem}", hint=hint)


def read_build_manifest(path: Path, named: Path) -> Manifest:
    """A build manifest, or a one-line refusal naming what is wrong with it."""
    try:
        doc = read_manifest(path)
    except OSError as exc:
        raise _refuse(named, f"{path.name} cannot be read ({exc.strerror or exc})") from None
    except StateError as exc:
        problem = str(exc)
        if "schema" in problem:
            raise _refuse(named, f"{problem}",
                          hint="rebuild the working build with this version of onebit-build") from None
        if "not valid JSON" in problem:
            raise _refuse(named, f"{path} is not valid JSON") from None
        raise _refuse(named, f"{path} is not a build manifest of onebit-build ({problem})") from None
    if not isinstance(doc.get("components"), list) or not isinstance(doc.get("recipe"), dict):
        raise _refuse(named, f"{path} names no components or recipe",
                      hint="rebuild the working build with onebit-build")
    try:
        return Manifest.from_doc(doc, str(path))
    except (StateError, VerifyError) as exc:
        raise _refuse(named, f"{path} is not a readable build manifest ({exc})",
                      hint="rebuild the working build with onebit-build") from None


def server_component(man: Manifest) -> ComponentRecord | None:
    """The (last) component whose outputs include llama-server."""
    for comp in reversed(man.components):
        if comp.output(SERVER) is not None:
            return comp
    return None


def anchored(recorded: str, recorded_dir: str, actual_dir: Path) -> Path:
    """``recorded`` (a path under ``recorded_dir``) moved under ``actual_dir``; paths outside
    ``recorded_dir`` stay as they are. Pure."""
    rec = Path(recorded)
    try:
        return actual_dir / rec.relative_to(recorded_dir)
    except ValueError:
        return rec


def outputs_of(man: Manifest, *, server_comp: ComponentRecord, folder: Path,
               installed: bool = False) -> tuple[WorkingOutput, ...]:
    """Every output of every component; those of the server's component re-anchored at
    ``folder``. Under an install prefix every output is in ``folder/bin``. Pure."""
    out = []
    for comp in man.components:
        for o in comp.outputs:
            path = Path(o.path)
            if installed:
                path = folder / "bin" / path.name
            elif comp is server_comp:
                path = anchored(o.path, comp.build_dir, folder)
            out.append(WorkingOutput(name=o.name, path=path, sha256=o.sha256))
    return tuple(out)


def _server_rel(comp: ComponentRecord) -> Path:
    rec = comp.output(SERVER)
    try:
        return Path(rec.path if rec else "").relative_to(comp.build_dir)
    except ValueError:
        return Path("bin") / SERVER


def _manifest_above(server: Path) -> Path | None:
    """The build folder (or install prefix) a llama-server file belongs to: the nearest
    folder above it (up to three levels) that holds a build manifest."""
    for folder in list(server.parents)[:3]:
        if (folder / MANIFEST).is_file() or (folder / INSTALLED_MANIFEST).is_file():
            return folder
    return None


def _locate(named: Path) -> tuple[Path, str | None]:
    """The folder holding the build manifest ``named`` points at, and how it was given
    (SERVER_FILE, or None when the folder itself or its manifest was named)."""
    if named.is_file():
        if named.name == MANIFEST:
            return named.parent, None
        folder = _manifest_above(named)
        if folder is None:
            raise _refuse(named, f"not a build: no {MANIFEST} in the folders above this file")
        return folder, SERVER_FILE
    if named.is_dir():
        if not (named / MANIFEST).is_file() and not (named / INSTALLED_MANIFEST).is_file():
            raise _refuse(named, f"not a build: the folder holds no {MANIFEST}")
        return named, None
    raise _refuse(named, "not a file or folder")


def _check_server(named: Path, server: Path, folder: Path, given: str) -> None:
    if given == SERVER_FILE and server.resolve() != named:
        raise _refuse(named, f"this is not the llama-server of the build in {folder} (that is {server})",
                      hint="give the build folder itself")
    if not server.is_file():
        raise _refuse(named, f"its llama-server ({server}) is missing",
                      hint="the build was cleaned or moved: rebuild it, or give another")
    if not os.access(server, os.X_OK):
        raise _refuse(named, f"its llama-server ({server}) is not executable",
                      hint="restore the file's execute permission")


def resolve_working(path: Path, *, recipe: str) -> ResolvedBuild:
    """The working build ``path`` names (see the module's docstring), for ``recipe``."""
    named = Path(path).expanduser()
    if not named.exists():
        raise _refuse(named, "no such file or folder")
    named = named.resolve()
    folder, given = _locate(named)
    installed = not (folder / MANIFEST).is_file()
    manifest_path = folder / (INSTALLED_MANIFEST if installed else MANIFEST)
    doc = read_build_manifest(manifest_path, named)
    got = doc.recipe
    if got != recipe:
        raise _refuse(named, f"a build of recipe {got!r}, not {recipe!r}",
                      hint=f"pass --recipe {got} to verify builds of {got}, or give a working build of {recipe}")
    comp = server_component(doc)
    if comp is None:
        raise _refuse(named, f"{manifest_path} records no {SERVER} output",
                      hint="give a build of a recipe that builds llama-server")
    rel = Path("bin") / SERVER if installed else _server_rel(comp)
    if installed:
        given = given or INSTALL_PREFIX
    elif given is None:
        # A build folder holds the server where the manifest says, relative to it; a run
        # folder does not, and names the build folder instead.
        if (folder / rel).is_file():
            given = BUILD_FOLDER
        else:
            given = RUN_FOLDER
            folder = Path(comp.build_dir)
            if not comp.build_dir or not folder.is_dir():
                raise _refuse(named, f"the build folder this run made ({folder}) no longer exists",
                              hint="give an existing working build, or rebuild it")
    server = folder / rel
    _check_server(named, server, folder, given)
    return ResolvedBuild(folder=folder, server=server, manifest_path=manifest_path, manifest=doc, given_as=given,
                         outputs=outputs_of(doc, server_comp=comp, folder=folder, installed=installed))


def resolve_new(manifest_path: Path, doc: Manifest) -> ResolvedBuild:
    """The build just made (its manifest is fresh; its outputs are where it records them)."""
    comp = server_component(doc)
    if comp is None:
        raise ConfigError(f"{manifest_path} records no {SERVER} output",
                          hint="verify-run needs a recipe that builds llama-server")
    folder = Path(comp.build_dir)
    return ResolvedBuild(folder=folder, server=folder / _server_rel(comp), manifest_path=manifest_path, manifest=doc,
                         given_as=BUILD_FOLDER, outputs=outputs_of(doc, server_comp=comp, folder=folder))


def same_build(a: ResolvedBuild, b: ResolvedBuild) -> bool:
    """Whether two resolved builds are the very same folder (comparing it with itself
    would prove nothing)."""
    return a.folder.resolve() == b.folder.resolve()
