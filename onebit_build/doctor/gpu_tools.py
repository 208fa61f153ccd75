"""Doctor's checks of the GPU toolchains a recipe builds with: glslc and Vulkan headers
recent enough for what the recipe's patches make work, nvcc and the CUDA binary tools."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Iterable, Mapping

from onebit_build.checking.artifacts import KINDS
from onebit_build.spec.recipe import Recipe
from onebit_build.core.proc import probe, version_line
from onebit_build.doctor.requirements import Check


VULKAN_MIN_HEADER = (1, 3, 261)  # unpatched ggml-vulkan uses VK_EXT_layer_settings
# A patch that makes older headers work says so in its message, as a trailer line.
VULKAN_MIN_TRAILER = re.compile(r"^Vulkan-Headers-Minimum:\s*(\d+)\.(\d+)\.(\d+)\s*$", re.M)

# --------------------------------------------------------------------------- probes


def vulkan_header_version(text: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) from vulkan_core.h. Pure."""
    m = re.search(r"#define\s+VK_HEADER_VERSION\s+(\d+)", text)
    if not m:
        return None
    patch = int(m.group(1))
    c = re.search(r"#define\s+VK_HEADER_VERSION_COMPLETE\s+VK_MAKE_API_VERSION"
                  r"\(\s*\d+\s*,\s*(\d+)\s*,\s*(\d+)\s*,", text)
    if c:
        return int(c.group(1)), int(c.group(2)), patch
    return 1, 3, patch


def vulkan_header_dirs(environ: Mapping[str, str]) -> list[Path]:
    dirs = []
    if environ.get("VULKAN_SDK"):
        dirs.append(Path(environ["VULKAN_SDK"]) / "include")
    dirs += [Path("/usr/local/include"), Path("/usr/include")]
    return dirs


def vulkan_minimum(patches: Iterable[Path]) -> tuple[tuple[int, int, int], str]:
    """The oldest Vulkan headers the recipe's llama.cpp builds with, and why: the lowest
    minimum a patch of its series declares (``Vulkan-Headers-Minimum: X.Y.Z`` in its message),
    else ggml-vulkan's own."""
    found = []
    for p in patches:
        m = VULKAN_MIN_TRAILER.search(p.read_text(errors="replace").split("\n---\n", 1)[0])
        if m:
            found.append(((int(m.group(1)), int(m.group(2)), int(m.group(3))), f"with {p.name}"))
    return min(found) if found else (VULKAN_MIN_HEADER, "VK_EXT_layer_settings")


def vulkan_checks(environ: Mapping[str, str], patches: Iterable[Path] = ()) -> list[Check]:
    checks = []
    glslc = shutil.which("glslc", path=environ.get("PATH"))
    version = version_line(glslc) if glslc else None
    if version is not None:
        checks.append(Check(name="glslc", ok=True, detail=f"{glslc}: {version}"))
    else:
        checks.append(Check(name="glslc", ok=False, detail="glslc not found on PATH",
                            fix="install it (Debian/Ubuntu: apt-get install glslc; or the Vulkan SDK)"))
    for d in vulkan_header_dirs(environ):
        header = d / "vulkan" / "vulkan_core.h"
        if header.is_file():
            v = vulkan_header_version(header.read_text(errors="replace"))
            if v is None:
                checks.append(Check(name="Vulkan headers", ok=False, detail=f"{header}: no VK_HEADER_VERSION",
                                    fix="reinstall the Vulkan headers (apt-get install libvulkan-dev)"))
            elif v < (low := vulkan_minimum(patches))[0]:
                checks.append(Check(name="Vulkan headers", ok=False,
                                    detail=f"{header}: {'.'.join(map(str, v))}, older than {'.'.join(map(str, low[0]))}"
                                           f" ({low[1]})",
                                    fix="install newer headers (Debian 13 and Ubuntu 24.04 ship them, "
                                        "or the Vulkan SDK with $VULKAN_SDK)"))
            else:
                checks.append(Check(name="Vulkan headers", ok=True,
                                    detail=f"{header}: {'.'.join(map(str, v))} "
                                           f"(at least {'.'.join(map(str, low[0]))}, {low[1]})"))
            return checks
    checks.append(Check(name="Vulkan headers", ok=False, detail="no vulkan/vulkan_core.h in "
                        + ", ".join(str(d) for d in vulkan_header_dirs(environ)),
                        fix="install them (Debian/Ubuntu: apt-get install libvulkan-dev) or set $VULKAN_SDK"))
    return checks


CUDA_TOOLS = (
    ("nvcc", "the CUDA compiler", "install the CUDA toolkit and put its bin folder on PATH (or set CUDACXX)"),
    ("cuobjdump", "lists the recipe's cubin artifacts",
     "install the CUDA toolkit, or the nvidia-cuda-cuobjdump wheel and put its bin folder on PATH"),
    ("nvdisasm", "cuobjdump -sass needs it for the cubin digests",
     "install the CUDA toolkit, or the nvidia-cuda-nvdisasm wheel and put its bin folder on PATH"),
)


def cuda_checks(recipe: Recipe, environ: Mapping[str, str]) -> list[Check]:
    checks = []
    collector_tools = {t for c in recipe.components for a in c.artifacts if a in KINDS for t in KINDS[a].tools}
    for tool, why, fix in CUDA_TOOLS:
        if tool != "nvcc" and tool not in collector_tools:
            continue
        path = (environ.get("CUDACXX") if tool == "nvcc" and environ.get("CUDACXX")
                else shutil.which(tool, path=environ.get("PATH")))
        text = probe([path, "--version"], env=environ) if path else None
        if text is None:
            checks.append(Check(name=tool, ok=False, detail=f"{tool} not found or not working ({why})", fix=fix))
            continue
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        release = next((ln for ln in lines if "release" in ln), lines[0] if lines else "")
        checks.append(Check(name=tool, ok=True, detail=f"{path}: {release}"))
    return checks
