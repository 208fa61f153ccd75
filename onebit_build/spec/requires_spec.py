"""A recipe's ``requires`` section: what a machine needs before the first configure, checked by
``doctor`` and at the start of every run (all at once, not the first only). Validated at load."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from onebit_build.spec.yamlnode import Node

VERSION_RE = re.compile(r"^\d+(\.\d+){0,2}$")


@dataclass(frozen=True, kw_only=True)
class CxxStandard:
    """The C++ standard a component's sources ask for, read from ``file`` in its fetched tree
    (``set(CMAKE_CXX_STANDARD N)``); ``expect`` is the value read upstream near the pin, used
    until the tree is fetched."""

    component: str
    file: str
    expect: int


@dataclass(frozen=True, kw_only=True)
class RequiresSpec:
    cmake: str | None = None  # lowest CMake version (the sources' cmake_minimum_required)
    python: str | None = None  # lowest Python 3 for build-time scripts
    amdgpu_clang: tuple[str, ...] = ()  # components whose C compiler must be a Clang for amdgcn
    cxx_standard: CxxStandard | None = None
    vulkan_device: str | None = None  # text the Vulkan ICD's device name must contain


def version_tuple(text: str) -> tuple[int, ...]:
    """``3.26.1`` -> (3, 26, 1); leading digits of each part only. Pure."""
    out = []
    for part in text.split("."):
        m = re.match(r"\d+", part)
        if not m:
            break
        out.append(int(m.group(0)))
    return tuple(out)


def _version(node: Node, key: str) -> str | None:
    value = node.get(key, str, required=False, default=None)
    if value is not None and not VERSION_RE.match(value):
        node.fail(f"{key} {value!r} is not a version", 'write it as a string, e.g. "3.26"', key=key)
    return value


def load_requires(root: Node, components: set[str]) -> RequiresSpec | None:
    node = root.child("requires", required=False)
    if node is None:
        return None
    node.only({"cmake", "python", "amdgpu_clang", "cxx_standard", "vulkan_device"})
    clang = node.str_list("amdgpu_clang", required=False)
    for name in clang:
        if name not in components:
            node.fail(
                f"unknown component {name!r}", f"use some of: {', '.join(sorted(components))}", key="amdgpu_clang"
            )
    cxx = None
    cnode = node.child("cxx_standard", required=False)
    if cnode is not None:
        cnode.only({"component", "file", "expect"})
        comp = cnode.get("component", str)
        if comp not in components:
            cnode.fail(f"unknown component {comp!r}", f"use some of: {', '.join(sorted(components))}", key="component")
        file = cnode.get("file", str)
        if file.startswith("/") or ".." in PurePosixPath(file).parts:
            cnode.fail(f"file {file!r} must be relative to the source tree", "e.g. ggml/CMakeLists.txt", key="file")
        expect = cnode.get("expect", int)
        if expect not in (11, 14, 17, 20, 23, 26):
            cnode.fail(f"expect {expect} is not a C++ standard", "use 17, 20, 23 or 26", key="expect")
        cxx = CxxStandard(component=comp, file=file, expect=expect)
    device = node.get("vulkan_device", str, required=False, default=None)
    return RequiresSpec(
        cmake=_version(node, "cmake"),
        python=_version(node, "python"),
        amdgpu_clang=clang,
        cxx_standard=cxx,
        vulkan_device=device or None,
    )
