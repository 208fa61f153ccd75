"""The HSA runtime HRX loads: TheRock's, or one that leaves HRX without a device.

HRX opens the library with dlopen: the path ``IREE_HAL_AMDGPU_LIBHSA_PATH`` names, else
``libhsa-runtime64.so.1`` from the loader's search path (LD_LIBRARY_PATH, then the system's
cache). A distribution's libhsa-runtime64 rejects the PM4 emulation probe on gfx1151, so HRX
then registers no device; TheRock's answers it (docs/strix-halo-upstream.md, Q5 and H9). Which
one a machine would load is decided here from the files alone (no GPU is needed)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Mapping

from onebit_build.core.proc import PROBE_TIMEOUT_S, capture
from onebit_build.doctor.requirements import Check

LIBHSA = "libhsa-runtime64.so.1"
# Where a distribution installs its libraries: a libhsa from here is the packaged one.
SYSTEM_LIB_DIRS = ("/usr/lib", "/usr/lib64", "/lib", "/lib64")
WHY = "a distribution's libhsa-runtime64 rejects the PM4 emulation probe on gfx1151, so HRX registers no device"


def is_system_library(path: str, system_dirs: tuple[str, ...] = SYSTEM_LIB_DIRS) -> bool:
    """Whether ``path`` lies in a system library folder (a distribution's package). Pure."""
    parts = Path(os.path.normpath(path)).parts
    return any(parts[:len(Path(d).parts)] == Path(d).parts for d in system_dirs)


def loader_libhsa(environ: Mapping[str, str]) -> str | None:
    """The ``libhsa-runtime64.so.1`` dlopen would find by name: LD_LIBRARY_PATH first, then the
    loader's cache (``ldconfig -p``); None when neither has one."""
    for folder in filter(None, environ.get("LD_LIBRARY_PATH", "").split(":")):
        if (Path(folder) / LIBHSA).is_file():
            return str(Path(folder) / LIBHSA)
    ldconfig = shutil.which("ldconfig", path=f"{environ.get('PATH', '')}:/sbin:/usr/sbin")
    if ldconfig is None:
        return None
    out = capture([ldconfig, "-p"], timeout=PROBE_TIMEOUT_S)
    m = re.search(rf"^\s*{re.escape(LIBHSA)} \(.*\) => (\S+)$", out.stdout, re.M)
    return m.group(1) if m else None


def hsa_runtime_check(key: str, found: str | None, root: Path, patterns: tuple[str, ...],
                      environ: Mapping[str, str], system_dirs: tuple[str, ...] = SYSTEM_LIB_DIRS) -> Check:
    """The HSA runtime the smoke stage hands HRX in ``$key``: the one given there, else the one
    ``found`` under TheRock's ``root``; without either, what dlopen would load instead."""
    given = environ.get(key)
    fix = f"install TheRock (its {LIBHSA}) under the toolchain root, or point ${key} at TheRock's"
    if given:
        if not Path(given).is_file():
            return Check(name="HSA runtime", ok=False, detail=f"{given} (given in ${key}): no such file",
                         fix=f"point ${key} at TheRock's {LIBHSA}, or unset it")
        if is_system_library(given, system_dirs) and not is_system_library(given, (str(root),)):
            return Check(name="HSA runtime", ok=False, detail=f"{given} (given in ${key}) is the system's: {WHY}",
                         fix=fix)
        return Check(name="HSA runtime", ok=True, detail=f"{given} (given in ${key})")
    if found:
        return Check(name="HSA runtime", ok=True, detail=f"{found} (for ${key})")
    instead = loader_libhsa(environ)
    detail = f"no {', '.join(patterns)} under {root}"
    detail += f"; HRX would load {instead} instead: {WHY}" if instead else f"; no {LIBHSA} on the loader's path either"
    return Check(name="HSA runtime", ok=False, detail=detail, fix=fix)
