"""The Strix Halo build end to end on small real stand-ins for its three sources.

The stand-ins are tiny CMake projects in real git repositories, with real patch series; their
sources are the files under tests/standins/hrx/. They model the upstream sources where the
build depends on them, as docs/strix-halo-upstream.md records them (written here from those
facts; no upstream code):

- ``hrx`` (ROCm/hrx): options with upstream's defaults. ``IREE_HAL_DRIVER_AMDGPU`` is OFF
  unless passed, and only with it does libhrx link the AMDGPU driver (whose PM4 probe
  fails like gfx1151's until patch 0003). ``IREE_ENABLE_WERROR_FLAG`` is ON unless passed
  and adds ``-Werror`` to ``-Wall``, and one source warns the way a newer compiler than
  upstream's CI does, so the build stops without OFF. libhrx and libloomc carry the
  install/export rules and the export version script that the series removes, and the
  AMDGPU target list is checked selector by selector.
- ``hrx-system`` (ROCm/hrx-system): the same tree; its ``loom-link`` takes only the
  command line the fork's link script uses (``<input> --mode=selective --root=@<symbol>
  --to=bytecode --output=<file>``), selects the root symbol from the module, and writes
  deterministic bytecode that records the input's path like the real tool. A later commit
  removes ``--mode=selective`` (the commit the pin must stay before).
- ``llama.cpp-hrx`` (the fork): ``LLAMA_USE_PREBUILT_UI`` ON by default (the stand-in
  stops where the fork would download the web UI), ``GGML_NATIVE``'s default flipped by
  ``SOURCE_DATE_EPOCH``, and a ggml-hrx2 whose CMake needs what the fork's needs:
  ``find_package(hrx CONFIG REQUIRED)``, ``find_program(GGML_HRX2_LOOM_LINK_EXECUTABLE
  ... REQUIRED)``, the targets ``loom::binding::c::loomc`` and
  ``loom::binding::c::target::amdgpu``. Its catalog is split like the fork's (sources,
  48 artifacts in the real ``artifacts.json`` format, routes with an index) and is
  assembled, validated, linked with loom-link once per route, validated again with every
  artifact required, and embedded into a shared ``ggml-hrx2`` library. The CMake output
  list names fewer artifacts than the catalog, as the fork's does.

The real ``recipes/strix-halo.yaml`` is what the tests build. Each upstream requirement
the recipe meets is shown to be needed: without it a test fails and says which one.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from _support import GIT_ENV, REPO, git, run_cli
from onebit_build.building.artifacts import parse_loombc_catalog, read_cmake_cache
from onebit_build.core.errors import VerifyError
from onebit_build.core.fsutil import sha256_file
from onebit_build.building.manifest import read_manifest

# --------------------------------------------------------------------------- the catalog

# 12 kernel sources with 4 entry points each: 48 artifacts, as at the fork's pin.
OPS = ("rms_norm", "add_rms_norm_mul", "get_rows", "mul_mat_q4_0", "mul_mat_q8_0", "quantize_q8_1",
       "rope_neox", "soft_max", "swiglu", "set_rows", "cont", "sum_rows")
VARIANTS = ("f32", "f32_static", "f32_tiled", "f32_wide")
ARTIFACTS = tuple(f"{op}_{v}" for op in OPS for v in VARIANTS)
CATALOG_SCHEMA = "ggml-hrx2-catalog-v1"

# What the recipe must give, and what goes wrong upstream without it. A failing test
# names the requirement with these lines.
MISSED = {
    "IREE_HAL_DRIVER_AMDGPU": (
        "IREE_HAL_DRIVER_AMDGPU=ON is missing: ROCm/hrx builds its AMDGPU HAL driver only when asked "
        "(default OFF, runtime/project.cmake), so libhrx registers no GPU and HRX20 never appears"),
    "IREE_ENABLE_WERROR_FLAG": (
        "IREE_ENABLE_WERROR_FLAG=OFF is missing: ROCm/hrx compiles with -Werror by default (CMakeLists.txt, "
        "build_tools/cmake/iree_copts.cmake), so one warning of TheRock's newer amdclang stops the build"),
    "loom-link": (
        "loom-link was not run the way the fork runs it, '<absolute .loom> --mode=selective --root=@<symbol> "
        "--to=bytecode --output=<file>' (tools/link_hrx2_artifacts.py), or it no longer supports that"),
    "downloads": (
        "the hsa_runtime_headers download is not handed to CMake: ROCm/hrx's configure fetches it with FetchContent "
        "(MODULE.cmake.lock, build_tools/third_party/rocm/headers.cmake), which --offline and mirrors cannot serve"),
    "LLAMA_BUILD_UI": (
        "LLAMA_BUILD_UI=OFF is missing: the fork builds its embedded web UI by default (CMakeLists.txt), from its "
        "sources when the prebuilt one is off; the smoke test and bench need the API only"),
    "LLAMA_USE_PREBUILT_UI": (
        "LLAMA_USE_PREBUILT_UI=OFF is missing: the fork downloads its prebuilt web UI at build time by default "
        "(CMakeLists.txt), which breaks --offline and mirrors"),
}


def missed_requirements(text: str) -> list[str]:
    """The upstream requirements a failed stand-in build shows it missed. Pure."""
    found = []
    if "-Werror" in text and "unused variable" in text:
        found.append(MISSED["IREE_ENABLE_WERROR_FLAG"])
    if re.search(r"loom-link: (unknown option|unknown --mode|unsupported --to|--root must|missing)", text):
        found.append(MISSED["loom-link"])
    if "hsa_runtime_headers" in text and "example.invalid" in text and re.search(r"(?i)download", text):
        found.append(MISSED["downloads"])
    if "would build its web UI from its sources" in text:
        found.append(MISSED["LLAMA_BUILD_UI"])
    if "would download the prebuilt web UI" in text:
        found.append(MISSED["LLAMA_USE_PREBUILT_UI"])
    return found


def failure_report(out: subprocess.CompletedProcess, ws: Path) -> str:
    """What a failed build says, led by the upstream requirements it missed."""
    logs = "\n".join(p.read_text(errors="replace") for p in sorted(ws.rglob("*.log"))) if ws.exists() else ""
    missed = missed_requirements(out.stderr + "\n" + logs)
    head = "\n".join(f"upstream requirement missed: {m}" for m in missed) or "no known upstream requirement matched"
    return f"{head}\n--- onebit-build said:\n{out.stderr[-4000:]}"


# --------------------------------------------------------------------------- the stand-in sources

# The stand-ins' sources are real files (tests/standins/hrx/): 'hrx' is the tree of ROCm/hrx
# (and of ROCm/hrx-system), 'llama' the fork's, 'therock' the fake HSA runtime. What depends
# on a test's values is filled in here: the lock's URL and sha256, the fork's CMake output list
# and the link script's loom-link command line.
STANDINS = Path(__file__).resolve().parent / "standins" / "hrx"


def tree_files(name: str) -> dict[str, str]:
    """Every file of one stand-in tree, by path relative to it."""
    root = STANDINS / name
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def section(text: str, start: str, end: str) -> str:
    """The part of ``text`` from the line holding ``start`` to the end of the line holding ``end``."""
    i = text.rindex("\n", 0, text.index(start)) + 1
    j = text.index("\n", text.index(end, i)) + 1
    return text[i:j]


# The stand-in headers archive that the lock of the stand-in tree names. Its URL cannot be
# reached from a test, so configure fails unless the tool hands CMake the unpacked tree.
HSA_ARCHIVE = "4285513114a70f7cf4830c89279c8cfa57b901bb.tar.gz"
HSA_URL = f"https://example.invalid/iree-org/hsa-runtime-headers/archive/{HSA_ARCHIVE}"


def hsa_archive(dest_dir: Path) -> tuple[Path, str]:
    """A real tar.gz with one top folder holding include/hsa/hsa.h; its path and sha256."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = dest_dir / HSA_ARCHIVE
    data = b"int hsa_init(void);\n"
    with tarfile.open(out, "w:gz") as tar:
        info = tarfile.TarInfo(f"hsa-runtime-headers-{HSA_ARCHIVE[:40]}/include/hsa/hsa.h")
        info.size, info.mtime = len(data), 0
        tar.addfile(info, io.BytesIO(data))
    return out, sha256_file(out)


def hrx_tree(hsa_sha256: str) -> dict[str, str]:
    files = tree_files("hrx")
    lock = files.pop("MODULE.cmake.lock.in")
    files["MODULE.cmake.lock"] = lock.replace("@URL@", HSA_URL).replace("@SHA256@", hsa_sha256)
    return files


HRX = tree_files("hrx")
LIBHRX_CMAKE = HRX["libhrx/CMakeLists.txt"]
# libloomc: the export version script and the export rules form one block (patch 0002).
LOOMC_EXPORTS = section(HRX["loom/binding/c/CMakeLists.txt"], "target_link_options(loomc_shared", "loomc-targets.cmake")
LOOM_LINK_C = HRX["loom/src/loom/tools/loom-link/loom_link.c"]
# The commit the hrx-system pin must stay before: --mode=selective is gone.
SELECTIVE_CHECK = 'strcmp(mode, "selective") != 0'

# The stand-in series, as (message, {path: (old, new)}) edits of the pinned tree.
NO_INSTALL_EXPORT = ("libhrx: leave out the install and export rules of hrx-targets", {
    "libhrx/CMakeLists.txt": (LIBHRX_CMAKE,
                              "add_subdirectory(src/libhrx)\n"
                              "install(FILES include/hrx_runtime.h DESTINATION include/hrx)\n"),
})
NO_VERSION_SCRIPT = ("loomc: drop the export version script and the export rules", {
    "loom/binding/c/CMakeLists.txt": (LOOMC_EXPORTS,
                                      "install(TARGETS loomc_shared EXPORT loomc-targets LIBRARY DESTINATION lib)\n"),
})
PM4_NATIVE = ("amdgpu: treat a failed PM4-emulation probe as native AQL", {
    "runtime/src/iree/hal/drivers/amdgpu/util/aql_ring.c": (
        "    return -1;\n  }\n  return pm4_emulation;", "    pm4_emulation = 0;\n  }\n  return pm4_emulation;"),
})

# The command line the fork's link script gives loom-link (tools/link_hrx2_artifacts.py).
FORK_LOOM_LINK_ARGS = ('[str(a.loom_link), str(source), "--mode=selective", f"--root={route[\'root_symbol\']}", '
                       '"--to=bytecode", f"--output={output}"]')
# The invented one the stand-ins used before they modelled the fork.
OLD_LOOM_LINK_ARGS = '[str(a.loom_link), "--mode=selective", "-o", str(output), str(source)]'


def catalog_files() -> dict[str, str]:
    """The fork's split catalog: metadata, sources, 48 artifacts in the real format, one
    route file per kernel source and the route index. The plain-f32 kernels have a second
    route (another shape) to the same artifact, as the fork's catalog has."""
    sources = {op: {"path": f"kernels/{op}.loom"} for op in OPS}
    artifacts: dict[str, dict[str, str]] = {}
    files: dict[str, str] = {}
    order: list[str] = []
    for op in OPS:
        routes = []
        for v in VARIANTS:
            name = f"{op}_{v}"
            entry = {"path": f"artifacts/{name}.loombc", "format": "loom-bytecode", "storage": "embedded"}
            if v == "f32_static":
                entry["source_id"] = op
            artifacts[f"{name}_bc"] = entry
            for shape in (("generic", "n4096") if v == "f32" else ("generic",)):
                routes.append({"id": f"{name}_{shape}", "family": op, "source_id": op, "artifact_id": f"{name}_bc",
                               "root_symbol": f"@hrx2_{name}", "export_name": f"hrx2_{name}", "priority": 10})
        files[f"ggml/src/ggml-hrx2/catalog/routes/{op}.json"] = json.dumps(routes, indent=1) + "\n"
        order += [r["id"] for r in routes]
    base = "ggml/src/ggml-hrx2/catalog"
    files[f"{base}/metadata.json"] = json.dumps({"schema": CATALOG_SCHEMA}) + "\n"
    files[f"{base}/sources.json"] = json.dumps(sources, indent=1) + "\n"
    files[f"{base}/artifacts.json"] = json.dumps(artifacts, indent=1) + "\n"
    files[f"{base}/routes/index.json"] = json.dumps(order, indent=1) + "\n"
    return files


def llama_tree(loom_link_args: str = FORK_LOOM_LINK_ARGS) -> dict[str, str]:
    files = tree_files("llama")
    # Like the fork's, the CMake output list names fewer artifacts than the catalog.
    named = [n for n in ARTIFACTS if not n.endswith("_wide")]
    listed = "\n".join(f'    "${{GGML_HRX2_ARTIFACT_ROOT}}/artifacts/{n}.loombc"' for n in named)
    cm = "ggml/src/ggml-hrx2/CMakeLists.txt"
    files[cm] = files[cm].replace("@ARTIFACT_OUTPUTS@", listed)
    link = "ggml/src/ggml-hrx2/tools/link_artifacts.py"
    files[link] = files[link].replace("LOOM_LINK_ARGS", loom_link_args)
    files.update(catalog_files())
    for op in OPS:
        files[f"ggml/src/ggml-hrx2/kernels/{op}.loom"] = "".join(
            f"kernel @hrx2_{op}_{v}(%x: tensor) {{ // {v}\n  return %x\n}}\n" for v in VARIANTS)
    return files


# --------------------------------------------------------------------------- repositories


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    repo.mkdir(parents=True, exist_ok=True)
    if not (repo / ".git").exists():
        git(repo, "init", "-q", "-b", "main")
    write_files(repo, files)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def side_commit(repo: Path, base: str, files: dict[str, str], message: str, branch: str) -> str:
    """A commit on ``branch`` from ``base``; the main branch stays at ``base``."""
    sha = commit(repo, files, message)
    git(repo, "branch", "-f", branch, sha)
    git(repo, "reset", "-q", "--hard", base)
    return sha


def make_series(repo: Path, base: str, edits: list[tuple[str, dict[str, tuple[str, str]]]],
                out_dir: Path) -> list[Path]:
    """Commit each edit on top of ``base``, write them with format-patch, reset to ``base``."""
    for message, changes in edits:
        files = {}
        for rel, (old, new) in changes.items():
            text = (repo / rel).read_text()
            assert old in text, f"{rel}: stand-in edit does not match"
            files[rel] = text.replace(old, new, 1)
        commit(repo, files, message)
    out_dir.mkdir(parents=True, exist_ok=True)
    git(repo, "format-patch", "-q", "--zero-commit", "--no-signature", "-o", str(out_dir), f"{base}..HEAD")
    git(repo, "reset", "-q", "--hard", base)
    return sorted(out_dir.glob("*.patch"))


def fake_toolchain(root: Path) -> Path:
    """A TheRock-shaped folder: bin/amdclang(++) that run the system compilers,
    lib/llvm/bin/llvm-ar (the system ar) and lib/libhsa-runtime64.so.1."""
    for name, real in (("amdclang", "clang"), ("amdclang++", "clang++")):
        p = root / "bin" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        target = shutil.which(real)
        assert target, f"no {real} on this machine: install clang and lld (see .ci/run)"
        p.write_text(f"#!/bin/sh\nexec {target} \"$@\"\n")
        p.chmod(p.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    ar = root / "lib" / "llvm" / "bin" / "llvm-ar"
    ar.parent.mkdir(parents=True, exist_ok=True)
    system_ar = shutil.which("ar")
    assert system_ar, "no ar on this machine"
    os.symlink(system_ar, ar)
    # A real shared library (tests/standins/hrx/therock/hsa_standin.c), loaded with dlopen.
    subprocess.run([shutil.which("cc") or "gcc", "-shared", "-fPIC", "-Wl,-soname,libhsa-runtime64.so.1",
                    "-o", str(root / "lib" / "libhsa-runtime64.so.1"), str(STANDINS / "therock" / "hsa_standin.c")],
                   check=True)
    return root


def bare(repo: Path, mirrors: Path, name: str) -> Path:
    mirrors.mkdir(parents=True, exist_ok=True)
    dest = mirrors / f"{name}.git"
    if dest.exists():
        shutil.rmtree(dest)
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(dest)], check=True, env={**os.environ, **GIT_ENV})
    return dest


def make_standins(base: Path) -> dict[str, object]:
    """Repositories, mirrors and patch series of the three stand-ins."""
    repos, mirrors, series = base / "repos", base / "mirrors", base / "series"
    _, hsa_sha = hsa_archive(mirrors)
    hrx_commit = commit(repos / "hrx", hrx_tree(hsa_sha), "hrx stand-in")
    hrx_patches = make_series(repos / "hrx", hrx_commit, [NO_INSTALL_EXPORT, NO_VERSION_SCRIPT, PM4_NATIVE],
                              series / "hrx")
    sys_commit = commit(repos / "hrx-system", hrx_tree(hsa_sha), "hrx-system stand-in")
    sys_patches = make_series(repos / "hrx-system", sys_commit, [NO_VERSION_SCRIPT], series / "hrx-system")
    assert LOOM_LINK_C.count(SELECTIVE_CHECK) == 1
    removal = commit(repos / "hrx-system", {"loom/src/loom/tools/loom-link/loom_link.c": LOOM_LINK_C.replace(
        SELECTIVE_CHECK, 'strcmp(mode, "whole") != 0')}, "loom-link: remove --mode=selective")
    llama_commit = commit(repos / "llama", llama_tree(), "llama.cpp fork stand-in")
    old_cli = side_commit(repos / "llama", llama_commit, llama_tree(OLD_LOOM_LINK_ARGS),
                          "link script: the invented loom-link command line", "old-cli")
    for name, repo in (("hrx", "hrx"), ("hrx-system", "hrx-system"), ("llama.cpp-hrx", "llama")):
        bare(repos / repo, mirrors, name)
    return {
        "hrx": hrx_commit, "hrx-system": sys_commit, "removal": removal, "llama.cpp-hrx": llama_commit,
        "llama-old-cli": old_cli, "patches": {"hrx": hrx_patches, "hrx-system": sys_patches}, "mirrors": mirrors,
        "hsa_sha256": hsa_sha,
    }


def project(root: Path, s: dict[str, object], *, system_commit: str | None = None, llama_commit: str | None = None,
            recipe_without: tuple[str, ...] = ()) -> Path:
    """A project folder with the REAL strix-halo recipe and template, pins that name the
    stand-ins (abbreviated like the real hrx-system pin) and the stand-in patch series.
    ``recipe_without`` drops those defines from the recipe (each must be there)."""
    (root / "recipes" / "strix-halo").mkdir(parents=True, exist_ok=True)
    recipe = (REPO / "recipes" / "strix-halo.yaml").read_text()
    for define in (d for d in recipe_without if d != "downloads"):
        line = re.compile(rf"^ +{re.escape(define)}: .*\n", re.M)
        assert len(line.findall(recipe)) == 1, f"the recipe has no single {define} define"
        recipe = line.sub("", recipe)
    # The stand-in headers archive instead of the real one (like the pins below).
    real = re.search(r"url: (https://github.com/iree-org/hsa-runtime-headers/\S+)\n +sha256: ([0-9a-f]{64})", recipe)
    assert real, "the recipe declares no hsa_runtime_headers download"
    recipe = recipe.replace(real.group(1), HSA_URL).replace(real.group(2), str(s["hsa_sha256"]))
    for name in recipe_without:
        if name == "downloads":
            recipe = re.sub(r"^    downloads: .*\n(      .*\n)*", "", recipe, flags=re.M)
    (root / "recipes" / "strix-halo.yaml").write_text(recipe)
    shutil.copy(REPO / "recipes" / "strix-halo" / "hrx-config.cmake.in",
                root / "recipes" / "strix-halo" / "hrx-config.cmake.in")
    sys_commit = system_commit or str(s["hrx-system"])
    (root / "pins.yaml").write_text(
        "schema: 1\nsources:\n"
        f"  hrx:\n    url: https://example.invalid/hrx.git\n    commit: {s['hrx']}\n"
        f"  hrx-system:\n    url: https://example.invalid/hrx-system.git\n    commit: {sys_commit[:8]}\n"
        "    abbreviated: true\n"
        f"    note: must stay before {s['removal']}, which removed loom-link --mode=selective\n"
        f"    before: {s['removal']}\n"
        f"  llama.cpp-hrx:\n    url: https://example.invalid/llama.git\n    branch: 1bit-engine/hrx-vulkan\n"
        f"    commit: {llama_commit or s['llama.cpp-hrx']}\n"
    )
    for source, files in dict(s["patches"]).items():  # type: ignore[arg-type]
        d = root / "patches" / source
        d.mkdir(parents=True, exist_ok=True)
        for f in files:
            shutil.copy(f, d / f.name)
    return root


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    base = tmp_path_factory.mktemp("hrx")
    s = make_standins(base)
    root = project(base / "proj", s)
    tc = fake_toolchain(base / "therock")
    return {"s": s, "root": root, "tc": tc, "ws": base / "ws", "base": base}


def cli(st, *args, env=None, timeout=600):
    return run_cli(st["root"], "--workspace", str(st["ws"]), "--mirror-dir", str(st["s"]["mirrors"]), "--hrx", "on",
                   *args, env=env, timeout=timeout)


def build(st, root: Path, ws: Path, env: dict[str, str] | None = None):
    return run_cli(root, "--workspace", str(ws), "--mirror-dir", str(st["s"]["mirrors"]), "--hrx", "on",
                   "--toolchain-root", str(st["tc"]), "build", env=env, timeout=600)


@pytest.fixture(scope="module")
def built(standins):
    out = build(standins, standins["root"], standins["ws"])
    assert out.returncode == 0, failure_report(out, standins["ws"])
    man = read_manifest(standins["ws"] / "manifests" / "strix-halo.json")
    return {**standins, "out": out, "man": man}


def comp(man, name):
    return next(c for c in man["components"] if c["name"] == name)


def output(man, component: str, name: str) -> str:
    return next(o["path"] for o in comp(man, component)["outputs"] if o["name"] == name)


def list_devices(man, tc: Path, *, with_hsa: bool = True, ld_path: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("IREE_HAL_AMDGPU_LIBHSA_PATH", "LD_LIBRARY_PATH")}
    if ld_path is not None:
        env["LD_LIBRARY_PATH"] = str(ld_path)
    if with_hsa:
        env["IREE_HAL_AMDGPU_LIBHSA_PATH"] = str(tc / "lib" / "libhsa-runtime64.so.1")
    return subprocess.run([output(man, "llama", "llama-server"), "--list-devices"], capture_output=True, text=True,
                          env=env, check=True).stdout


def hrx20_problem(man, tc: Path) -> str | None:
    """Why a built server lists no HRX20 though the HSA runtime is given, or None."""
    if "HRX20" in list_devices(man, tc):
        return None
    cache = read_cmake_cache(Path(comp(man, "hrx-runtime")["build_dir"]))
    if cache.get("IREE_HAL_DRIVER_AMDGPU", "").upper() not in ("ON", "1", "TRUE", "YES"):
        return MISSED["IREE_HAL_DRIVER_AMDGPU"]
    return "HRX20 is missing although the AMDGPU driver was built: is the PM4-probe patch (hrx/0003) applied?"


# --------------------------------------------------------------------------- the build


def test_build_order_and_defines(built):
    man, tc, err = built["man"], built["tc"], built["out"].stderr
    assert [c["name"] for c in man["components"]] == ["hrx-runtime", "loom-link", "llama"]
    # The stages ran in that order too.
    positions = [err.index(f"configuring {n} ") for n in ("hrx-runtime", "loom-link", "llama")]
    assert positions == sorted(positions)
    rt, ll, llama = comp(man, "hrx-runtime"), comp(man, "loom-link"), comp(man, "llama")
    for c in (rt, ll):
        d = c["defines"]
        assert d["CMAKE_C_COMPILER"] == f"{tc}/bin/amdclang" and d["CMAKE_CXX_COMPILER"] == f"{tc}/bin/amdclang++"
        assert d["CMAKE_ASM_COMPILER"] == f"{tc}/bin/amdclang"
        assert d["CMAKE_AR"] == f"{tc}/lib/llvm/bin/llvm-ar"
        assert d["IREE_HAL_AMDGPU_TARGETS"] == ("gfx9-generic;gfx90a;gfx9-4-generic;gfx10-1-generic;gfx10-3-generic;"
                                                "gfx11-generic;gfx12-generic")
        assert d["IREE_HAL_DRIVER_AMDGPU"] == "ON" and d["IREE_ENABLE_WERROR_FLAG"] == "OFF"
        assert "IREE_ROCM_PATH" not in d
        # What the stand-in runtime's CMake made of them: upstream's defaults overridden.
        cache = read_cmake_cache(Path(c["build_dir"]))
        assert cache["IREE_HAL_DRIVER_AMDGPU"] == "ON" and cache["IREE_ENABLE_WERROR_FLAG"] == "OFF"
        assert cache["IREE_HAL_DRIVER_DEFAULTS"] == "OFF" and cache["BUILD_SHARED_LIBS"] == "ON"
    assert ll["defines"]["LIBHRX_BUILD"] == "OFF" and "LIBHRX_BUILD" not in rt["defines"]
    assert rt["targets"] == ["libhrx_src_libhrx_hrx", "loomc_shared", "loom_binding_c_target_amdgpu_amdgpu.objects"]
    assert ll["targets"] == ["loom_tools_loom-link_loom-link"]
    assert llama["targets"] == ["llama-server", "llama-bench"]
    # Later components got the earlier ones' outputs by name.
    prefix = output(man, "hrx-runtime", "prefix")
    loom_link = output(man, "loom-link", "loom-link")
    assert prefix == f"{rt['build_dir']}/onebit-prefix"
    assert llama["defines"]["hrx_DIR"] == f"{prefix}/cmake/hrx"
    assert llama["defines"]["GGML_HRX2_LOOM_LINK_EXECUTABLE"] == loom_link
    assert loom_link == f"{ll['build_dir']}/loom/src/loom/tools/loom-link/loom-link"
    assert llama["defines"]["GGML_HRX2"] == "ON" and llama["defines"]["GGML_VULKAN"] == "ON"
    assert llama["defines"]["LLAMA_USE_PREBUILT_UI"] == "OFF" and llama["defines"]["LLAMA_BUILD_UI"] == "OFF"
    assert llama["defines"]["LLAMA_BUILD_COMMIT"] == str(built["s"]["llama.cpp-hrx"])[:7]
    # GGML_NATIVE is given, so SOURCE_DATE_EPOCH (set or not) cannot flip it.
    assert llama["defines"]["GGML_NATIVE"] == "ON" and read_cmake_cache(Path(llama["build_dir"]))["GGML_NATIVE"] == "ON"
    # The abbreviated pin was resolved and locked; hrx is pinned in full.
    lock = (built["root"] / "pins.lock").read_text()
    assert str(built["s"]["hrx-system"]) in lock


def test_dry_run_shows_the_upstream_requirements(standins):
    out = cli(standins, "--toolchain-root", str(standins["tc"]), "--dry-run")
    assert out.returncode == 0, out.stderr
    # The defines as the build's CMakeInit.txt sets them, one per line.
    for define in ("IREE_HAL_DRIVER_AMDGPU=ON", "IREE_ENABLE_WERROR_FLAG=OFF",
                   f"CMAKE_ASM_COMPILER={standins['tc']}/bin/amdclang",
                   "LLAMA_USE_PREBUILT_UI=OFF", "LLAMA_BUILD_UI=OFF", "GGML_NATIVE=ON"):
        assert f"\n      {define}\n" in out.stdout, define
    assert out.stdout.count("\n      IREE_HAL_DRIVER_AMDGPU=ON\n") == 2  # the runtime and loom-link
    # The configure-time download with its URL and sha256, for both components that ask for it.
    assert out.stdout.count(f"hsa_runtime_headers: {HSA_URL}") == 2
    checked = f"sha256 {standins['s']['hsa_sha256']} (checked against the pinned tree's MODULE.cmake.lock)"
    assert out.stdout.count(checked) == 2
    assert out.stdout.count("\n      FETCHCONTENT_FULLY_DISCONNECTED=ON\n") == 2


def test_offline_names_a_missing_download_before_configure(standins, tmp_path):
    mirrors = tmp_path / "mirrors"
    for name in ("hrx", "hrx-system", "llama.cpp-hrx"):
        shutil.copytree(standins["s"]["mirrors"] / f"{name}.git", mirrors / f"{name}.git")
    out = run_cli(standins["root"], "--workspace", str(tmp_path / "ws"), "--mirror-dir", str(mirrors), "--offline",
                  "--hrx", "on", "--toolchain-root", str(standins["tc"]), "build")
    assert out.returncode == 4, out.stderr
    assert f"hsa_runtime_headers ({HSA_URL}, sha256 {standins['s']['hsa_sha256']})" in out.stderr
    assert f"put {HSA_ARCHIVE} in a --mirror-dir" in out.stderr and "configuring" not in out.stderr


def test_standin_runtime_refuses_a_compiler_that_is_not_clang(standins, tmp_path):
    """What ROCm/hrx's configure does with the AMDGPU driver on and GCC as the C compiler."""
    from onebit_build.building.cmake import find_tools

    gcc = shutil.which("gcc")
    assert gcc, "no gcc on this machine"
    src = standins["base"] / "repos" / "hrx"
    out = subprocess.run([str(find_tools().cmake), "-S", str(src), "-B", str(tmp_path / "b"),
                          f"-DCMAKE_C_COMPILER={gcc}", "-DIREE_HAL_DRIVER_AMDGPU=ON"], capture_output=True, text=True)
    assert out.returncode != 0
    said = " ".join(out.stderr.split())
    assert "IREE_HAL_DRIVER_AMDGPU=ON requires the configured C compiler to be Clang-family" in said


def test_patch_series_applied_and_prefix_assembled(built):
    man = built["man"]
    srcs = {s["name"]: s for s in man["sources"]}
    assert [p["name"][:4] for p in srcs["hrx"]["patches"]] == ["0001", "0002", "0003"]
    assert [p["name"][:4] for p in srcs["hrx-system"]["patches"]] == ["0001"]
    prefix = Path(output(man, "hrx-runtime", "prefix"))
    lib = prefix / "lib"
    assert (lib / "libhrx.so").is_symlink() and (lib / "libhrx.so.0.1.0").is_file() and (lib / "libloomc.so.0").exists()
    assert (prefix / "include" / "hrx_runtime.h").is_file() and (prefix / "include" / "loomc" / "loomc.h").is_file()
    members = subprocess.run(["ar", "t", str(lib / "libloomc_amdgpu.a")], capture_output=True,
                             text=True, check=True).stdout.split()
    assert members == ["amdgpu.c.o"]
    config = (prefix / "cmake" / "hrx" / "hrx-config.cmake").read_text()
    assert "loom::binding::c::target::amdgpu" in config and "hrx-runtime" in config
    # Assembled, not installed: the export rules are off, so no targets file exists anywhere.
    assert not list(Path(comp(man, "hrx-runtime")["build_dir"]).rglob("hrx-targets.cmake"))
    # The server links (libloomc without its version script) and, given the HSA runtime,
    # lists HRX20 (the AMDGPU driver built, the probe patched) next to Vulkan0.
    problem = hrx20_problem(man, built["tc"])
    assert problem is None, f"upstream requirement missed: {problem}"
    listing = list_devices(man, built["tc"])
    assert "gfx1151" in listing and "Vulkan0" in listing
    assert "HRX20" not in list_devices(man, built["tc"], with_hsa=False)
    # Unset, the runtime falls back to the canonical name on the system search path, as
    # upstream's libhsa.c does: found there, HRX20 is listed without the variable.
    assert "HRX20" in list_devices(man, built["tc"], with_hsa=False, ld_path=built["tc"] / "lib")


def test_artifacts_counted_hashed_and_from_canonical_paths(built):
    man = built["man"]
    llama = comp(man, "llama")
    src = next(s for s in man["sources"] if s["name"] == "llama.cpp-hrx")
    tree = src["tree"]
    commit = str(built["s"]["llama.cpp-hrx"])
    assert tree == str(built["ws"] / "src" / f"llama.cpp-hrx-{commit[:12]}-{src['patch_digest'][:12]}")
    catalog = json.loads((Path(tree) / "ggml/src/ggml-hrx2/catalog/artifacts.json").read_text())
    assert isinstance(catalog, dict) and len(catalog) == len(ARTIFACTS) == 48
    sets = llama["artifacts"]
    assert [s["kind"] for s in sets] == ["loombc"]
    loombc = sets[0]
    # All 48 the catalog lists, though the fork's CMake output list names only 36.
    assert loombc["count"] == 48
    assert sorted(i["name"] for i in loombc["items"]) == sorted(f"artifacts/{n}.loombc" for n in ARTIFACTS)
    assert loombc["facts"]["source_dir"] == tree
    root = Path(llama["build_dir"]) / "ggml/src/ggml-hrx2/generated/catalog"
    assert loombc["root"] == str(root)
    for item in loombc["items"]:
        f = root / item["name"]
        assert item["sha256"] == sha256_file(f)
        # loom-link was given the kernel source's absolute path inside the canonical tree
        # and the route's root symbol.
        name = item["name"][len("artifacts/"):-len(".loombc")]
        op = next(o for o in OPS if name.startswith(o + "_f32"))
        head = f.read_bytes().split(b"\n")[:3]
        assert head == [b"LOOMBC1", f"source {tree}/ggml/src/ggml-hrx2/kernels/{op}.loom".encode(),
                        f"root @hrx2_{name}".encode()]
    # The fork embedded every one of them.
    run = subprocess.run([output(man, "llama", "llama-server")], capture_output=True, text=True, check=True)
    assert ": 48 HRX2 kernels" in run.stdout


def test_verify_reference_and_rebuild(built, tmp_path):
    ref = tmp_path / "strix-halo-reference.json"
    out = cli(built, "--toolchain-root", str(built["tc"]), "verify", "--write-reference", str(ref))
    assert out.returncode == 0, out.stderr
    doc = json.loads(ref.read_text())
    assert doc["recipe"] == "strix-halo"
    out = cli(built, "--toolchain-root", str(built["tc"]), "verify", "--reference", str(ref))
    assert out.returncode == 0, out.stderr
    assert "48/48 byte-identical" in out.stderr
    # A reference whose bytes differ fails; one built from another path only warns.
    bad = json.loads(ref.read_text())
    llama = next(c for c in bad["components"] if c["name"] == "llama")
    llama["artifacts"][0]["items"][0]["sha256"] = "0" * 64
    llama["artifacts"][0]["facts"]["source_dir"] = "/elsewhere/llama.cpp-hrx"
    ref.write_text(json.dumps(bad))
    out = cli(built, "--toolchain-root", str(built["tc"]), "verify", "--reference", str(ref))
    assert out.returncode == 11
    assert "47/48 byte-identical" in out.stderr and "differs" in out.stderr
    assert "built from another path" in out.stderr
    # The whole stack again in another build folder: the kernels come out byte-identical
    # (same canonical source paths). The binaries that differ are the ones whose run path
    # names the prefix inside the other hrx-runtime build folder.
    out = cli(built, "--toolchain-root", str(built["tc"]), "verify", "--rebuild")
    assert "HRX2 Loom bytecode: 48/48 byte-identical" in out.stderr, out.stderr
    differing = {line.split()[1] for line in out.stderr.splitlines() if line.strip().startswith("differs ")}
    assert differing and "llama-server" in differing, out.stderr
    # Only binaries whose run path names a build folder differ (the prefix's libraries name
    # the runtime's build folder, the fork's name the prefix inside it).
    paths = {o["name"]: Path(o["path"]) for c in built["man"]["components"] for o in c["outputs"]}
    for name in differing:
        if paths[name].is_dir():  # the prefix: its libraries are outputs of their own
            continue
        assert f"{built['ws']}/build/strix-halo-".encode() in paths[name].read_bytes(), name
    assert out.returncode == 11


def test_install_runs_after_the_build_folders_are_gone(standins, tmp_path):
    """The prefix carries every library its libraries load (libiree_base.so.* from the build
    folder, found through DT_NEEDED); install carries the closure of llama-server; with every
    build folder deleted, the installed server still lists both devices."""
    ws, prefix = tmp_path / "ws", tmp_path / "installed"
    out = run_cli(standins["root"], "--workspace", str(ws), "--mirror-dir", str(standins["s"]["mirrors"]),
                  "--hrx", "on", "--toolchain-root", str(standins["tc"]), "install", "--prefix", str(prefix),
                  timeout=600)
    assert out.returncode == 0, failure_report(out, ws)
    man = read_manifest(ws / "manifests" / "strix-halo.json")
    rt_prefix = Path(output(man, "hrx-runtime", "prefix"))
    bundled = sorted(p.name for p in (rt_prefix / "lib").glob("libiree_base.so*"))
    assert bundled, "the runtime's prefix lacks libiree_base, which libhrx and libloomc load"
    names = {o["name"] for o in comp(man, "hrx-runtime")["outputs"]}
    assert {f"prefix/lib/{n}" for n in bundled} <= names and "prefix/lib/libhrx.so.0.1.0" in names
    for lib in ("libhrx.so.0", "libloomc.so.0", "libggml.so", "libggml-hrx2.so", *bundled):
        assert (prefix / "bin" / lib).is_file(), lib
    shutil.rmtree(ws / "build")
    env = {**{k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"},
           "IREE_HAL_AMDGPU_LIBHSA_PATH": str(standins["tc"] / "lib" / "libhsa-runtime64.so.1")}
    server = str(prefix / "bin" / "llama-server")
    run = subprocess.run([server, "--list-devices"], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    assert "HRX20" in run.stdout and "Vulkan0" in run.stdout, run.stdout
    kernels = subprocess.run([str(prefix / "bin" / "llama-server")], capture_output=True, text=True, env=env)
    assert kernels.returncode == 0 and ": 48 HRX2 kernels" in kernels.stdout, kernels.stderr


def test_rerun_is_a_noop_and_a_damaged_prefix_is_reassembled(built):
    out = cli(built, "--toolchain-root", str(built["tc"]), "build")
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("(up to date)") == 3
    prefix = Path(output(built["man"], "hrx-runtime", "prefix"))
    (prefix / "include" / "hrx_runtime.h").unlink()
    out = cli(built, "--toolchain-root", str(built["tc"]), "build")
    assert out.returncode == 0, out.stderr
    assert "hrx-runtime (up to date)" not in out.stderr and (prefix / "include" / "hrx_runtime.h").is_file()
    # The llama build depends on the prefix's bytes, which came back identical: reused.
    assert "llama (up to date)" in out.stderr


def test_doctor_lists_the_gpu_once_built(built):
    out = cli(built, "doctor", env={"ONEBIT_TOOLCHAIN_ROOT": str(built["tc"])})
    assert "ok    GPU devices" in out.stdout and "HRX20, Vulkan0" in out.stdout, out.stdout
    assert "gfx1151 is listed" in out.stdout
    # The architecture is what the server prints (from the HSA runtime), not the recipe's word.
    other = cli(built, "doctor", env={"ONEBIT_TOOLCHAIN_ROOT": str(built["tc"]), "HSA_STANDIN_AGENT": "gfx1100"})
    assert re.search(r"FAIL +GPU +no gfx1151 in the device list", other.stdout), other.stdout
    assert "amdclang++" in out.stdout and "source hrx-system" in out.stdout
    assert re.search(r"ok +ASM compiler +\S+/bin/amdclang", out.stdout), out.stdout
    assert re.search(r"ok +built hrx-runtime +", out.stdout), out.stdout


# --------------------------------------------------------------------------- loom-link


def test_standin_loom_link_takes_the_forks_command_line_only(built, tmp_path):
    loom_link = output(built["man"], "loom-link", "loom-link")
    kernel = tmp_path / "k.loom"
    kernel.write_text("kernel @hrx2_k_f32(%x: tensor) {\n  return %x\n}\n")
    good = [str(kernel), "--mode=selective", "--root=@hrx2_k_f32", "--to=bytecode", f"--output={tmp_path / 'k.loombc'}"]
    assert subprocess.run([loom_link, *good], capture_output=True, text=True).returncode == 0
    assert (tmp_path / "k.loombc").read_bytes().startswith(f"LOOMBC1\nsource {kernel}\nroot @hrx2_k_f32\n".encode())
    wrong = {
        "-o": ["--mode=selective", "-o", str(tmp_path / "x"), str(kernel)],
        "--mode": [good[0], "--mode=whole", *good[2:]],
        "--root": [*good[:2], "--root=hrx2_k_f32", *good[3:]],
        "--to": [*good[:3], "--to=text", good[4]],
        "--output": good[:4],
    }
    for what, args in wrong.items():
        r = subprocess.run([loom_link, *args], capture_output=True, text=True)
        assert r.returncode == 2, (what, r.stderr)
        assert missed_requirements(r.stderr) == [MISSED["loom-link"]], (what, r.stderr)
    r = subprocess.run([loom_link, *good[:2], "--root=@hrx2_other", *good[3:]], capture_output=True, text=True)
    assert r.returncode == 1 and "no symbol @hrx2_other" in r.stderr


# --------------------------------------------------------------------------- proof that they matter


# Each requirement, and what is taken away to show it is needed: defines of the recipe,
# or (loom-link) the fork's command line, replaced by the invented one.
DROPPED = {
    "IREE_ENABLE_WERROR_FLAG": ("IREE_ENABLE_WERROR_FLAG",),
    "IREE_HAL_DRIVER_AMDGPU": ("IREE_HAL_DRIVER_AMDGPU",),
    # One at a time: without LLAMA_BUILD_UI=OFF the UI is built from its sources; the prebuilt
    # one is fetched only where the UI is built at all, so it is shown with both taken out
    # (and, alone, in test_the_prebuilt_ui_matters_only_with_the_ui_built).
    "LLAMA_BUILD_UI": ("LLAMA_BUILD_UI",),
    "LLAMA_USE_PREBUILT_UI": ("LLAMA_USE_PREBUILT_UI", "LLAMA_BUILD_UI"),
    "loom-link": (),
    "downloads": ("downloads",),
}


# CMake's download step asks again, after 0, 0, 5, 5, 15 and 60 s, when a host cannot be
# resolved (curl code 6): 85 s of waiting for example.invalid. A proxy that cannot be resolved
# is curl code 5, which CMake does not ask again: the same download of the same URL fails at
# once. Only the build without the recipe's downloads entry tries to download at all.
UNRESOLVABLE_PROXY = {name: "http://proxy.invalid:3128" for name in ("https_proxy", "HTTPS_PROXY", "all_proxy")}
NO_PROXY_BYPASS = {"no_proxy": "", "NO_PROXY": ""}


@pytest.mark.parametrize("missing", list(DROPPED))
def test_each_upstream_requirement_is_needed(standins, tmp_path, missing):
    """Without one of them the build or the device list fails, and the failure names the
    upstream requirement that was missed."""
    s = standins["s"]
    if missing == "loom-link":
        root = project(tmp_path / "proj", s, llama_commit=str(s["llama-old-cli"]))
    else:
        root = project(tmp_path / "proj", s, recipe_without=DROPPED[missing])
    ws = tmp_path / "ws"
    out = build(standins, root, ws, env={**UNRESOLVABLE_PROXY, **NO_PROXY_BYPASS} if missing == "downloads" else None)
    if missing == "IREE_HAL_DRIVER_AMDGPU":
        # Upstream builds fine without its GPU driver; the device list shows it.
        assert out.returncode == 0, failure_report(out, ws)
        assert hrx20_problem(read_manifest(ws / "manifests" / "strix-halo.json"), standins["tc"]) == MISSED[missing]
        return
    assert out.returncode == 9, out.stderr
    report = failure_report(out, ws)
    assert f"upstream requirement missed: {MISSED[missing]}" in report, report
    if missing == "downloads":  # the download was tried once, through the proxy, and not asked again
        said = [p.read_text(errors="replace") for p in sorted(ws.rglob("*.log"))]
        tries = [text.count(f"downloading '{HSA_URL}' failed") for text in said]
        assert max(tries) == 1 and any("status_code: 5" in text for text in said), (tries, report)


def test_the_prebuilt_ui_matters_only_with_the_ui_built(standins, tmp_path):
    """LLAMA_USE_PREBUILT_UI=OFF alone taken out: the UI is not built, nothing is downloaded."""
    root = project(tmp_path / "proj", standins["s"], recipe_without=("LLAMA_USE_PREBUILT_UI",))
    out = build(standins, root, tmp_path / "ws")
    assert out.returncode == 0, failure_report(out, tmp_path / "ws")


def test_hrx_system_pin_must_stay_before_the_removal(standins, tmp_path):
    s = standins["s"]
    root = project(tmp_path / "late", s, system_commit=str(s["removal"]))
    out = run_cli(root, "--workspace", str(tmp_path / "ws"), "--mirror-dir", str(s["mirrors"]), "--hrx", "on", "fetch")
    assert out.returncode == 2, out.stderr
    assert "must stay before" in out.stderr and str(s["removal"])[:12] in out.stderr


def test_missing_toolchain_fails_before_building(standins, tmp_path):
    out = run_cli(standins["root"], "--workspace", str(tmp_path / "ws"), "--mirror-dir", str(standins["s"]["mirrors"]),
                  "--hrx", "on", "--toolchain-root", str(tmp_path / "no-therock"), "build")
    # Refused before anything is fetched or configured, every missing piece named at once.
    assert out.returncode == 7, out.stderr
    missing = [ln for ln in out.stderr.splitlines() if "missing: hrx-runtime: " in ln]
    assert len(missing) == 3, out.stderr
    for piece in ("Clang C compiler", "amdgcn-amd-amdhsa probe", "Clang resource headers"):
        named = f"hrx-runtime: {piece}: {tmp_path}/no-therock/bin/amdclang"
        assert any(named in ln for ln in missing), (piece, out.stderr)
    assert "3 requirement(s) of recipe strix-halo are missing" in out.stderr and "configuring" not in out.stderr
    assert not (tmp_path / "ws" / "git").exists()


# --------------------------------------------------------------------------- the catalog format


def test_catalog_paths_from_the_real_format():
    doc = json.loads(catalog_files()["ggml/src/ggml-hrx2/catalog/artifacts.json"])
    names = parse_loombc_catalog(doc, Path("artifacts.json"))
    assert len(names) == 48 and names[0] == "artifacts/rms_norm_f32.loombc"
    # An entry of the other format the fork knows is not Loom bytecode: left out.
    doc["k_hsaco"] = {"path": "artifacts/k.hsaco", "format": "amdgpu-hsaco", "storage": "embedded"}
    assert len(parse_loombc_catalog(doc, Path("artifacts.json"))) == 48


@pytest.mark.parametrize("doc, problem", [
    ([{"name": "rms_norm_f32"}], "found a list"),
    ({"artifacts": [{"name": "rms_norm_f32"}]}, "entry 'artifacts' is a JSON list"),
    ({"a_bc": {"format": "loom-bytecode"}}, "entry 'a_bc' has no \"path\""),
    ({"a_bc": {"path": "artifacts/a.loombc"}}, "entry 'a_bc' has format None"),
    ({"a_bc": {"path": "../a.loombc", "format": "loom-bytecode"}}, "is not a .loombc file inside the artifact root"),
    ({"a_bc": {"path": "artifacts/a.loombc", "format": "loom-bytecode"},
      "b_bc": {"path": "artifacts/a.loombc", "format": "loom-bytecode"}}, "repeats path"),
    ({}, "lists no loom-bytecode artifact"),
])
def test_any_other_catalog_is_a_one_line_error(doc, problem):
    with pytest.raises(VerifyError) as exc:
        parse_loombc_catalog(doc, Path("/src/catalog/artifacts.json"))
    text = str(exc.value)
    assert "\n" not in text and problem in text, text
    assert text.startswith("/src/catalog/artifacts.json: ")
    assert '{"path": "artifacts/<name>.loombc", "format": "loom-bytecode"' in text
