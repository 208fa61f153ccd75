"""Build step: the wheel carries the project's data as package data.

pins.yaml, recipes/, patches/, references/, smoke/prompts/ and smoke/eval/ stay at the top of the
repository (the one place they are edited). Building the wheel copies them into
``onebit_build/data/`` of the build folder, so an installed tool finds them next to its
code. An editable install needs no copy: it runs from the checkout and reads them there.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent

# What the installed tool needs, relative to the repository root. pins.lock is optional.
PROJECT_DATA = ("pins.yaml", "pins.lock", "recipes", "patches", "references", "smoke/prompts", "smoke/eval")
DATA_PACKAGE_DIR = "data"


def copy_project_data(src_root: Path, dest: Path) -> list[str]:
    """Copy PROJECT_DATA from ``src_root`` into ``dest``; returns the files written."""
    written: list[str] = []
    for item in PROJECT_DATA:
        src = src_root / item
        if not src.exists():
            if item == "pins.lock":
                continue
            raise FileNotFoundError(f"{src}: project data missing from the source tree (check MANIFEST.in)")
        files = [src] if src.is_file() else sorted(
            p for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        for f in files:
            target = dest / f.relative_to(src_root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)
            written.append(str(target))
    return written


class build_py_with_data(build_py):
    """build_py that also places the project data under onebit_build/data/."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "onebit_build" / DATA_PACKAGE_DIR
        shutil.rmtree(dest, ignore_errors=True)
        self._data_outputs = copy_project_data(HERE, dest)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), *getattr(self, "_data_outputs", [])]


setup(cmdclass={"build_py": build_py_with_data})
