"""Kernel-artifact collectors, one per backend: what a build compiled for the GPU, hashed.

- ``spirv``: every ``.spv`` under the build's ``vulkan-shaders.spv`` folder;
- ``loombc``: the ``.loombc`` files the source's ``catalog/artifacts.json`` lists (HRX2), by
  each entry's ``path`` under the build's artifact root;
- ``cubin``: the per-kernel cubins inside ``libggml-cuda.so`` (needs ``cuobjdump``).

Each set also records the toolchain facts that shape its bytes, so that a difference can
be explained.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from onebit_build.core import proc, ui
from onebit_build.core.errors import VerifyError
from onebit_build.core.fsutil import StateError, read_state, sha256_bytes, sha256_file, write_state


SPIRV_DIR = "ggml/src/ggml-vulkan/vulkan-shaders.spv"
# The fork links each catalog entry to <artifact root>/<entry path> (artifacts/<name>.loombc).
LOOMBC_ROOT = "ggml/src/ggml-hrx2/generated/catalog"
LOOMBC_LIST = "ggml/src/ggml-hrx2/catalog/artifacts.json"


@dataclass(frozen=True, kw_only=True)
class Artifact:
    name: str
    size: int
    sha256: str
    extra: tuple[tuple[str, str], ...] = ()  # e.g. ("sass_sha256", ...)


@dataclass(frozen=True, kw_only=True)
class ArtifactSet:
    kind: str
    root: str  # folder the artifacts were read from
    items: tuple[Artifact, ...]
    facts: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return LABELS.get(self.kind, self.kind)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "label": self.label, "root": self.root, "count": len(self.items),
            "facts": dict(self.facts),
            "items": [{"name": a.name, "size": a.size, "sha256": a.sha256, **dict(a.extra)} for a in self.items],
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any], where: str) -> "ArtifactSet":
        try:
            items = tuple(
                Artifact(name=str(i["name"]), size=int(i["size"]), sha256=str(i["sha256"]),
                         extra=tuple((k, str(v)) for k, v in i.items() if k not in ("name", "size", "sha256")))
                for i in doc["items"]
            )
            return cls(kind=str(doc["kind"]), root=str(doc.get("root", "")), items=items,
                       facts={str(k): str(v) for k, v in dict(doc.get("facts", {})).items()})
        except (KeyError, TypeError, ValueError) as exc:
            raise VerifyError(f"{where}: malformed artifact set ({exc})",
                              hint="regenerate it with 'onebit-build verify --write-reference'") from None


def read_cmake_cache(build_dir: Path) -> dict[str, str]:
    """``KEY:TYPE=VALUE`` lines of CMakeCache.txt as a dict. Pure apart from the read."""
    out: dict[str, str] = {}
    cache = build_dir / "CMakeCache.txt"
    if not cache.exists():
        return out
    for line in cache.read_text(errors="replace").splitlines():
        m = re.match(r"^([A-Za-z0-9_.+-]+):[A-Z_]+=(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _files(kind: str, root: Path, names: list[str]) -> tuple[Artifact, ...]:
    return tuple(Artifact(name=n, size=(root / n).stat().st_size, sha256=sha256_file(root / n)) for n in names)


def collect_spirv(build_dir: Path) -> ArtifactSet:
    root = build_dir / SPIRV_DIR
    if not root.is_dir():
        raise VerifyError(f"no SPIR-V folder at {root}",
                          hint="is GGML_VULKAN=ON in the recipe, and did the build finish?")
    names = sorted(p.name for p in root.glob("*.spv") if p.is_file())
    cache = read_cmake_cache(build_dir)
    glslc = cache.get("Vulkan_GLSLC_EXECUTABLE") or shutil.which("glslc") or "glslc"
    facts = {"glslc": proc.version_line(glslc) or "unknown"}
    facts.update(glslc_probes(
        build_dir, Path(cache.get("CMAKE_HOME_DIRECTORY", "")) if cache.get("CMAKE_HOME_DIRECTORY") else None))
    return ArtifactSet(kind="spirv", root=str(root), items=_files("spirv", root, names), facts=facts)


PROBE_RE = re.compile(r"GGML_VULKAN_[A-Z0-9_]+_GLSLC_SUPPORT")


def glslc_probes(build_dir: Path, source_dir: Path | None) -> dict[str, str]:
    """Which glslc feature probes passed: each probe the source's CMake knows is ON when
    its define reaches the build (build.ninja), else OFF. (This source does not keep the
    probe results in CMakeCache.txt.)"""
    names: set[str] = set()
    if source_dir is not None:
        cml = source_dir / "ggml" / "src" / "ggml-vulkan" / "CMakeLists.txt"
        if cml.exists():
            names |= set(PROBE_RE.findall(cml.read_text(errors="replace")))
    ninja = build_dir / "build.ninja"
    seen: set[str] = set()
    if ninja.exists():
        seen = set(PROBE_RE.findall(ninja.read_text(errors="replace")))
    cache = read_cmake_cache(build_dir)
    out = {}
    for n in sorted(names | seen):
        out[n] = "ON" if n in seen or cache.get(n, "").upper() in ("ON", "1", "TRUE") else "OFF"
    return out


LOOMBC_FORMAT = "loom-bytecode"
# Formats the fork's catalog validation accepts; only Loom bytecode is linked by loom-link.
CATALOG_FORMATS = (LOOMBC_FORMAT, "amdgpu-hsaco")
CATALOG_SHAPE = ('one JSON object mapping each artifact id to {"path": "artifacts/<name>.loombc", '
                 '"format": "loom-bytecode", ...}')


def _catalog_error(path: Path, problem: str) -> VerifyError:
    return VerifyError(f"{path}: {problem}; expected the HRX2 artifact catalog format: {CATALOG_SHAPE}",
                       hint="check that the pinned fork is the ggml-hrx2 one and that its "
                            "catalog format has not changed")


def parse_loombc_catalog(doc: object, path: Path) -> list[str]:
    """The Loom bytecode paths (relative to the artifact root) that the fork's
    ``catalog/artifacts.json`` lists. Pure: ``path`` only names the file in errors.

    The format (ggml-hrx2): one object, ``{"<id>_bc": {"path": "artifacts/<name>.loombc",
    "format": "loom-bytecode", "storage": "embedded", ...}, ...}``. Entries of another
    format the fork knows (``amdgpu-hsaco``) are not linked by loom-link and are left out;
    anything else is an error, never skipped silently."""
    if not isinstance(doc, dict):
        found = "a list" if isinstance(doc, list) else f"a JSON {type(doc).__name__}"
        raise _catalog_error(path, f"found {found}")
    names: list[str] = []
    for key, entry in doc.items():
        if not isinstance(entry, dict):
            raise _catalog_error(path, f"entry {key!r} is a JSON {type(entry).__name__}, not an artifact object")
        if not isinstance(entry.get("path"), str) or not entry["path"]:
            raise _catalog_error(path, f"entry {key!r} has no \"path\" string")
        fmt = entry.get("format")
        if fmt not in CATALOG_FORMATS:
            raise _catalog_error(path, f"entry {key!r} has format {fmt!r} (known: {', '.join(CATALOG_FORMATS)})")
        if fmt != LOOMBC_FORMAT:
            continue
        rel = entry["path"]
        parts = Path(rel).parts
        if rel.startswith("/") or ".." in parts or not rel.endswith(".loombc"):
            raise _catalog_error(path, f"entry {key!r} path {rel!r} is not a .loombc file inside the artifact root")
        if rel in names:
            raise _catalog_error(path, f"entry {key!r} repeats path {rel!r}")
        names.append(rel)
    if not names:
        raise _catalog_error(path, "it lists no loom-bytecode artifact")
    return names


def loombc_expected(source_dir: Path) -> list[str]:
    """The artifact paths the source's catalog lists (the expected set), relative to the
    artifact root ``<build>/ggml/src/ggml-hrx2/generated/catalog``."""
    path = source_dir / LOOMBC_LIST
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise VerifyError(f"no artifact catalog at {path}", hint="is this the HRX fork with GGML_HRX2?") from None
    except ValueError as exc:
        raise VerifyError(f"{path}: not valid JSON ({exc})", hint="check the fork's catalog") from None
    return parse_loombc_catalog(doc, path)


def collect_loombc(build_dir: Path, source_dir: Path) -> ArtifactSet:
    root = build_dir / LOOMBC_ROOT
    expected = loombc_expected(source_dir)
    missing = [n for n in expected if not (root / n).is_file()]
    if missing:
        raise VerifyError(
            f"{len(missing)} of {len(expected)} listed Loom artifacts are missing in {root}: "
            f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}",
            hint="the HRX2 kernel build did not produce them; check the build log for loom-link errors",
        )
    cache = read_cmake_cache(build_dir)
    facts = {"source_dir": str(source_dir), "loom_link": cache.get("GGML_HRX2_LOOM_LINK_EXECUTABLE", ""),
             "catalog": f"{len(expected)} loom-bytecode entries in {LOOMBC_LIST}"}
    return ArtifactSet(kind="loombc", root=str(root), items=_files("loombc", root, sorted(expected)), facts=facts)


def find_cuda_library(build_dir: Path) -> Path | None:
    for p in sorted(build_dir.rglob("libggml-cuda.so*")):
        if p.is_file() and not p.is_symlink():
            return p
    return None


CUBIN_CACHE = "onebit-cubins.json"  # in the build dir: the set of the library it was read from
CUBIN_CACHE_KIND = "onebit-build/cubin-artifacts"
CUBIN_CACHE_SCHEMA = 1


def sass_code_digest(sass: str) -> str:
    """sha256 of ``cuobjdump -sass`` output without the lines that carry file names, so that
    it depends on the code only (nvcc can embed random temporary names)."""
    kept = (line for line in sass.splitlines()
            if not line.lstrip().startswith(("Fatbin", "code for", "arch =", "Function :"))
            or line.lstrip().startswith("Function :"))
    return sha256_bytes("\n".join(kept).encode())


def _cubin_item(cuobjdump: str, path: Path) -> Artifact:
    r = proc.capture([cuobjdump, "-sass", path])
    if not r.ok:
        raise VerifyError(f"cuobjdump -sass {path.name} failed (exit {r.returncode}): {r.stderr.strip()[-300:]}",
                          hint="is this cuobjdump from the CUDA toolkit that built the library?")
    return Artifact(name=path.name, size=path.stat().st_size, sha256=sha256_file(path),
                    extra=(("sass_sha256", sass_code_digest(r.stdout)),))


def _cached_cubins(cache: Path, lib_sha256: str, facts: dict[str, str]) -> ArtifactSet | None:
    try:
        doc = read_state(cache, CUBIN_CACHE_KIND, CUBIN_CACHE_SCHEMA)
        if doc.get("library_sha256") != lib_sha256:
            return None
        aset = ArtifactSet.from_dict(doc["set"], str(cache))
    except (FileNotFoundError, StateError, VerifyError, KeyError, TypeError):
        return None
    return aset if aset.facts == facts else None


# ``nvcc --version`` ends "Cuda compilation tools, release 13.0, V13.0.88" and a "Build" line.
NVCC_RELEASE = re.compile(r"release\s+\d+(?:\.\d+)*,\s*V(\d+(?:\.\d+)+)")
CUDA_COMPILER_FILE = re.compile(r'set\(CMAKE_CUDA_COMPILER_VERSION\s+"([^"]+)"\)')


def parse_nvcc_version(text: str) -> str | None:
    """The full version (``13.0.88``) in the output of ``nvcc --version``; None when it names
    none. Pure."""
    m = NVCC_RELEASE.search(text or "")
    return m.group(1) if m else None


def nvcc_version(build_dir: Path, cmake_cache: dict[str, str]) -> str:
    """The version of the nvcc that compiled this build folder: ``--version`` of the compiler
    its CMake cache names (else of CUDACXX or the nvcc on PATH), else the version CMake
    recorded when it identified the compiler; ``unknown`` when neither says."""
    compiler = (cmake_cache.get("CMAKE_CUDA_COMPILER") or os.environ.get("CUDACXX")
                or shutil.which("nvcc") or "")
    found = parse_nvcc_version(proc.probe([compiler, "--version"]) or "") if compiler else None
    if found:
        return found
    for info in sorted(build_dir.glob("CMakeFiles/*/CMakeCUDACompiler.cmake")):
        m = CUDA_COMPILER_FILE.search(info.read_text(errors="replace"))
        if m:
            return m.group(1)
    return cmake_cache.get("CMAKE_CUDA_COMPILER_VERSION", "unknown")


def collect_cubin(build_dir: Path, *, jobs: int | None = None) -> ArtifactSet:
    """Every cubin in libggml-cuda.so with its SASS digest. Listing the SASS of a full build
    takes minutes on one core, so it runs ``jobs`` cuobjdumps at a time and the result is kept
    in the build dir, keyed by the library's sha256: an unchanged library is not read again."""
    lib = find_cuda_library(build_dir)
    if lib is None:
        raise VerifyError(f"no libggml-cuda.so under {build_dir}", hint="is GGML_CUDA=ON in the recipe?")
    cmake_cache = read_cmake_cache(build_dir)
    facts = {
        "nvcc": nvcc_version(build_dir, cmake_cache),
        "architectures": cmake_cache.get("CMAKE_CUDA_ARCHITECTURES", "unknown"),
    }
    lib_sha256 = sha256_file(lib)
    cache_path = build_dir / CUBIN_CACHE
    cached = _cached_cubins(cache_path, lib_sha256, facts)
    if cached is not None:
        return cached
    cuobjdump = shutil.which("cuobjdump")
    if cuobjdump is None:
        raise VerifyError("cuobjdump not found: CUDA kernels cannot be listed",
                          hint="install the CUDA toolkit (cuobjdump) or skip artifact collection for CUDA")
    with tempfile.TemporaryDirectory(prefix="onebit-cubin-") as tmp:
        r = proc.capture([cuobjdump, "-xelf", "all", lib], cwd=Path(tmp))
        if not r.ok:
            raise VerifyError(f"cuobjdump -xelf all {lib.name} failed (exit {r.returncode}): {r.stderr.strip()[-300:]}",
                              hint="is this cuobjdump from the CUDA toolkit that built the library?")
        cubins = sorted(Path(tmp).iterdir())
        ui.info(f"  listing the SASS of {len(cubins)} CUDA cubins ({lib.name})")
        done = 0
        workers = max(1, jobs or os.cpu_count() or 1)
        with ui.StepProgress("cubins") as bar, ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(_cubin_item, cuobjdump, p) for p in cubins]
            for _ in as_completed(futures):
                done += 1
                bar.update(done, len(cubins))
            items = tuple(f.result() for f in futures)  # in the sorted order; re-raises the first failure
    aset = ArtifactSet(kind="cubin", root=str(lib), items=items, facts=facts)
    write_state(cache_path, CUBIN_CACHE_KIND, CUBIN_CACHE_SCHEMA, {"library_sha256": lib_sha256, "set": aset.to_dict()})
    return aset


# --------------------------------------------------------------------------- the kinds


@dataclass(frozen=True, kw_only=True)
class ArtifactKind:
    """Everything the tool knows of one kind of kernel artifact, in one place."""

    name: str  # as a recipe's ``artifacts:`` names it
    label: str
    collect: Callable[[Path, Path], ArtifactSet]  # (build folder, source tree) -> the set
    tool_fact: str  # the fact that names the tool that made them (the manifest's toolchain records it)
    path_matters: bool  # the bytes name their input's absolute path: sources stay at their canonical path
    tools: tuple[str, ...] = ()  # programs the collector runs (doctor checks them)


KINDS: dict[str, ArtifactKind] = {k.name: k for k in (
    ArtifactKind(name="spirv", label="Vulkan SPIR-V", collect=lambda build, _src: collect_spirv(build),
                 tool_fact="glslc", path_matters=False),
    ArtifactKind(name="loombc", label="HRX2 Loom bytecode", collect=collect_loombc, tool_fact="loom_link",
                 path_matters=True),
    ArtifactKind(name="cubin", label="CUDA cubins", collect=lambda build, _src: collect_cubin(build),
                 tool_fact="nvcc", path_matters=False, tools=("cuobjdump", "nvdisasm")),
)}
LABELS = {name: k.label for name, k in KINDS.items()}
# Facts that name the tool that made a kind's artifacts; the manifest's toolchain records them too.
TOOL_FACTS = tuple(k.tool_fact for k in KINDS.values())
# Facts that name where a build lived rather than how it was made: a difference there is a
# warning, not an explanation (loom-link embeds the source path, so it matters for loombc).
PATH_FACTS = frozenset({"source_dir", *(k.tool_fact for k in KINDS.values() if k.path_matters)})


def collect(kind: str, *, build_dir: Path, source_dir: Path) -> ArtifactSet:
    if kind not in KINDS:
        raise VerifyError(f"unknown artifact collector {kind!r}", hint=f"use one of: {', '.join(KINDS)}")
    return KINDS[kind].collect(build_dir, source_dir)
