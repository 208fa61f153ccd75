"""The Strix Halo build end to end on small real stand-ins for its three sources (the stand-ins
and their fixtures: _hrx_standins.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from _hrx_standins import (ARTIFACTS, HSA_ARCHIVE, HSA_URL, MISSED, OPS, build_project, cli, comp, failure_report,
                           hrx20_problem, list_devices, make_project, missed_requirements, output)
from _support import run_cli
from onebit_build.checking.artifacts import read_cmake_cache
from onebit_build.checking.manifest import read_manifest
from onebit_build.core.fsutil import sha256_file


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    return make_project(tmp_path_factory)


@pytest.fixture(scope="module")
def built(standins):
    return build_project(standins)


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


def test_provenance_names_the_outputs_of_all_three_build_folders(built):
    """Each component's outputs, from its own build folder (the assembled prefix by its files),
    are subjects that verify-provenance finds and matches; the three build keys come again from
    their recorded inputs."""
    man = built["man"]
    folder = Path(comp(man, "llama")["build_dir"])
    statement = json.loads((folder / "provenance.json").read_text())
    by_component: dict[str, int] = {}
    for s in statement["subject"]:
        by_component[s["annotations"]["component"]] = by_component.get(s["annotations"]["component"], 0) + 1
    assert set(by_component) == {"hrx-runtime", "loom-link", "llama"}
    assert all(s["name"] != "onebit-prefix" for s in statement["subject"])
    out = run_cli(built["root"], "--workspace", str(built["ws"]), "verify-provenance", str(folder))
    n = len(statement["subject"])
    assert out.returncode == 12 and "UNVERIFIED: the statement is unsigned" in out.stderr, out.stderr
    assert re.search(rf"subjects +ok +{n}/{n} files match", out.stderr), out.stderr
    assert re.search(r"build key +ok +3/3 recomputed", out.stderr) and re.search(r"materials +ok ", out.stderr)
