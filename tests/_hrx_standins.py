"""The stand-ins of the Strix Halo sources and the fixtures that build them (the tests are
test_hrx_standins.py and test_hrx_requirements.py).

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


from _support import GIT_ENV, REPO, git, run_cli
from onebit_build.checking.artifacts import read_cmake_cache
from onebit_build.core.fsutil import sha256_file
from onebit_build.checking.manifest import read_manifest

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
    "LIBHRX_BUILD_HIP_BINDING": (
        "LIBHRX_BUILD_HIP_BINDING=OFF is missing: with libhrx's HIP binding on (its default in libhrx/project.cmake) "
        "ROCm/hrx's CMakeLists.txt fetches zstd at configure time, a download nobody hands it"),
    "IREE_ENABLE_LIBBACKTRACE": (
        "IREE_ENABLE_LIBBACKTRACE=OFF is missing: where it is ON, ROCm/hrx's configure fetches libbacktrace "
        "(iree_configure_libbacktrace()), a download nobody hands it"),
    "AMDF_BUILD": (
        "AMDF_BUILD=OFF is missing: ROCm/hrx builds libamdf whenever the AMDGPU driver is on (libamdf/project.cmake), "
        "and its lock's amdf_wkmi files are downloads; the fork links no libamdf target"),
}
# The locked download each of those options brings in, as CMake names it when nobody handed it over.
UNSERVED = {"zstd": "LIBHRX_BUILD_HIP_BINDING", "libbacktrace": "IREE_ENABLE_LIBBACKTRACE",
            "amdf_wkmi_header": "AMDF_BUILD"}


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
    for name in re.findall(r"dependency\s+(\w+)\s+to\s+already\s+be\s+populated", text):
        if name in UNSERVED and MISSED[UNSERVED[name]] not in found:
            found.append(MISSED[UNSERVED[name]])
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


def make_project(tmp_path_factory) -> dict:
    """The stand-ins, a project of the real recipe over them and a fake toolchain (a test
    module's ``standins`` fixture)."""
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


def build_project(standins: dict) -> dict:
    """The strix-halo recipe built over the stand-ins (a test module's ``built`` fixture)."""
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
