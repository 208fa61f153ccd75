"""The toolchain a recipe names outside the system (e.g. TheRock): ``toolchain:`` in a recipe,
which ``${toolchain.root|ar|libhsa}`` read. Where it lies on a machine is resolved by
:mod:`onebit_build.building.toolchain`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from onebit_build.spec.yamlnode import Node


@dataclass(frozen=True, kw_only=True)
class ToolchainSpec:
    """A compiler toolchain outside the system (e.g. TheRock): ``${toolchain.root|ar|libhsa}``."""

    root: str
    root_env: str = "ONEBIT_TOOLCHAIN_ROOT"  # overrides root; --toolchain-root overrides both
    ar: tuple[str, ...] = ()  # candidates: paths relative to root, or program names on PATH
    libhsa: tuple[str, ...] = ()  # candidate globs relative to root


def load_toolchain(root: Node) -> ToolchainSpec | None:
    node = root.child("toolchain", required=False)
    if node is None:
        return None
    node.only({"root", "root_env", "ar", "libhsa"})
    where = node.get("root", str, fix="give the toolchain's install folder, e.g. /opt/rocm-therock")
    if not where.startswith("/"):
        node.fail(f"{where!r} is not an absolute path", "give an absolute folder", key="root")
    for key in ("ar", "libhsa"):
        for item in node.str_list(key, required=False):
            if item.startswith("/") or ".." in Path(item).parts:
                node.fail(f"{item!r} must be relative to the toolchain root", "remove the leading / and '..'", key=key)
    return ToolchainSpec(
        root=where,
        root_env=node.get("root_env", str, required=False, default="ONEBIT_TOOLCHAIN_ROOT"),
        ar=node.str_list("ar", required=False),
        libhsa=node.str_list("libhsa", required=False),
    )
