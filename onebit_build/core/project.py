"""Where the project data comes from: pins.yaml, recipes/, patches/, references/, smoke/prompts/, smoke/eval/.

A checkout of the project is used when one is named (``--root DIR``, ``$ONEBIT_ROOT``), when
the tool runs inside one, or when the package itself was loaded from one (an editable
install). Otherwise the copy that an installed wheel carries as package data is used.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from onebit_build.core.errors import ConfigError
from onebit_build.core.safepath import read_regular, resolved

PACKAGE_DIR = Path(__file__).resolve().parent.parent

# The largest file of the project read (a recipe, pins.yaml, a lock): the project's are a few KiB.
MAX_YAML_BYTES = 4 << 20

CHECKOUT = "checkout"
PACKAGE = "package"


@dataclass(frozen=True, kw_only=True)
class ProjectRoot:
    path: Path
    data_from: str  # CHECKOUT or PACKAGE
    found_by: str  # "--root", "$ONEBIT_ROOT", "current folder", "package location", "installed package"

    @property
    def pins(self) -> Path:
        return self.path / "pins.yaml"

    @property
    def models_lock(self) -> Path:
        """The sha256 of each model a recipe does not pin, recorded on first use."""
        return self.path / "models.lock"

    @property
    def recipes(self) -> Path:
        return self.path / "recipes"

    @property
    def patches(self) -> Path:
        return self.path / "patches"

    @property
    def references(self) -> Path:
        return self.path / "references"

    @property
    def prompts(self) -> Path:
        return self.path / "smoke" / "prompts"

    @property
    def smoke(self) -> Path:
        """smoke/: the prompts and the evaluation texts of the numerical check."""
        return self.path / "smoke"

    def describe(self) -> str:
        return f"{self.path} ({self.data_from}, found by {self.found_by})"


def is_project(folder: Path) -> bool:
    """A folder that holds the project data (a checkout, or the installed copy)."""
    return (folder / "pins.yaml").is_file() and (folder / "recipes").is_dir()


def pins_digest(root: ProjectRoot) -> str | None:
    """The first 12 hex digits of pins.yaml's sha256, or None when it cannot be read."""
    try:
        return hashlib.sha256(read_regular(root.pins, limit=MAX_YAML_BYTES)).hexdigest()[:12]
    except OSError:
        return None


def find_root(*, given: str | None, env: Mapping[str, str], cwd: Path, package_dir: Path = PACKAGE_DIR) -> ProjectRoot:
    """Pick the project root. Order: ``--root``, ``$ONEBIT_ROOT``, the current folder or one
    above it, the folder above the package (a checkout it was loaded from), the package data."""
    data = package_dir / "data"  # where setup.py places the project data inside a wheel
    for value, label in ((given, "--root"), (env.get("ONEBIT_ROOT"), "$ONEBIT_ROOT")):
        if value:
            path = resolved(value, label)
            if not path.is_dir():
                raise ConfigError(f"{label} {value}: no such folder",
                                  hint="name the folder that holds pins.yaml and recipes/")
            return ProjectRoot(path=path, data_from=PACKAGE if path == data.resolve() else CHECKOUT, found_by=label)
    here = resolved(cwd, "the current folder")
    for cand in (here, *here.parents):
        if is_project(cand):
            return ProjectRoot(path=cand, data_from=CHECKOUT, found_by="current folder")
    if is_project(package_dir.parent):
        return ProjectRoot(path=package_dir.parent, data_from=CHECKOUT, found_by="package location")
    if is_project(data):
        return ProjectRoot(path=data, data_from=PACKAGE, found_by="installed package")
    raise ConfigError(
        "no project data: not inside a checkout, and this installation carries no pins.yaml and recipes/",
        hint="run inside a checkout of onebit-build, pass --root DIR or set ONEBIT_ROOT, "
             "or reinstall from a built wheel",
    )
