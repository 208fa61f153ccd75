"""Interpolation in a recipe, ``${...}``, and the checks that keep it from becoming code:
``${pin.SOURCE.FIELD}``, ``${toolchain.FIELD}``, ``${COMPONENT.FIELD}`` and the defines that hold them (the name rules
themselves are in :mod:`onebit_build.core.names`). Pure functions: each returns what is
wrong (a problem and its fix) or None; the recipe loader and ``-D`` both use them."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable

from onebit_build.core.names import is_cmake_name

if TYPE_CHECKING:
    from onebit_build.spec.toolchain_spec import ToolchainSpec
    from onebit_build.spec.pins import Pins

INTERPOLATION_RE = re.compile(r"\$\{([^}]*)\}")

# ``${pin.SRC.FIELD}`` and ``${toolchain.FIELD}`` are not component references.
RESERVED_HEADS = ("pin", "toolchain")
TOOLCHAIN_FIELDS = ("root", "ar", "libhsa")
# ``tree``: the folder of the source's prepared (patched) tree, for a build that takes another
# pinned source as a folder (the HRX fork's HRX_SOURCE_DIR); that source is fetched and patched
# with the recipe's own.
PIN_FIELDS = ("commit", "short", "build_number", "branch", "tree")


def tree_sources(values: Iterable[str]) -> list[str]:
    """The sources ``values`` take as a folder (``${pin.SOURCE.tree}``), in order, once each. Pure."""
    out: list[str] = []
    for value in values:
        for ref in INTERPOLATION_RE.findall(value):
            parts = ref.split(".")
            if parts[0] == "pin" and len(parts) >= 3 and parts[-1] == "tree":
                out.append(".".join(parts[1:-1]))
    return list(dict.fromkeys(out))


def pin_value_problem(key: str, value: str, pins: Pins) -> tuple[str, str] | None:
    """(problem, fix) for the first ``${pin.SOURCE.FIELD}`` in ``value`` that names no pinned
    source or no field it has; None when every one is good. Pure."""
    for ref in INTERPOLATION_RE.findall(value):
        parts = ref.split(".")
        if parts[0] != "pin":
            continue
        source = ".".join(parts[1:-1])
        if len(parts) < 3 or source not in pins.sources or parts[-1] not in PIN_FIELDS:
            known = ", ".join(sorted(pins.sources))
            return (f"bad reference ${{{ref}}} in {key}",
                    f"write ${{pin.SOURCE.{'|'.join(PIN_FIELDS)}}} with SOURCE one of: {known}")
        if parts[-1] == "build_number" and pins.sources[source].build_number is None:
            return f"${{{ref}}}: source has no build_number", f"add build_number to {pins.path.name}"
    return None


def define_problem(key: str, value: str, pins: Pins, toolchain: ToolchainSpec | None) -> tuple[str, str] | None:
    """(problem, fix) for a define that cannot be written or resolved: a name that is not a
    CMake variable name, or a bad ``${pin...}`` / ``${toolchain...}`` reference. Pure."""
    if not is_cmake_name(key):
        return f"{key!r} is not a CMake variable name", "use letters, digits and '_' only, not starting with a digit"
    return pin_value_problem(key, value, pins) or toolchain_value_problem(key, value, toolchain)


def toolchain_value_problem(key: str, value: str, toolchain: ToolchainSpec | None) -> tuple[str, str] | None:
    """(problem, fix) for the first bad ``${toolchain.FIELD}`` in ``value``; None if none. Pure."""
    for ref in INTERPOLATION_RE.findall(value):
        parts = ref.split(".")
        if parts[0] != "toolchain":
            continue
        if toolchain is None:
            return (f"${{{ref}}} in {key}, but the recipe has no toolchain section",
                    "add 'toolchain: {root: ...}' to the recipe")
        if len(parts) != 2 or parts[1] not in TOOLCHAIN_FIELDS:
            return f"bad reference ${{{ref}}} in {key}", f"write ${{toolchain.{'|'.join(TOOLCHAIN_FIELDS)}}}"
    return None
