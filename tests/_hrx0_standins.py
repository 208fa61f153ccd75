"""The stand-ins of the hrx0 recipe's two sources and the fixtures that build them (the tests are
test_hrx0.py).

Their sources are the files under tests/standins/hrx0/, modelled on what
docs/strix-halo-upstream.md records (H1-H14), written here from those facts:

- ``llama`` (1bit-MONSTER/llama.cpp, 1bit/hrx-vulkan-patched): ggml-hrx builds the hrx-system
  tree named by ``HRX_SOURCE_DIR`` as an ExternalProject with the build's own compilers and the
  fork's arguments (the AMDGPU driver on), imports libhrx and libloomc from it, and runs its
  loom-format and loom-link over the kernel corpus; without ``HRX_SOURCE_DIR`` it asks for
  installed ``hrx`` and ``loomc`` packages and configure stops. ``GGML_VULKAN`` adds a Vulkan0.
- ``hrx-system`` (ROCm/hrx-system): the AMDGPU driver only when asked, and then only with a
  Clang-family C compiler; libhrx loads the HSA runtime as upstream does and registers a device
  only when the runtime answers the PM4 emulation probe.
- ``hsa``: TheRock's HSA runtime (answers the probe) and a distribution's (rejects it on gfx1151).

The real ``recipes/hrx0.yaml`` is what the tests build.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from _hrx_standins import bare, commit, fake_toolchain
from _support import REPO, run_cli

STANDINS = Path(__file__).resolve().parent / "standins" / "hrx0"
LIBHSA = "libhsa-runtime64.so.1"

MISSED = {
    "HRX_SOURCE_DIR": (
        "HRX_SOURCE_DIR is missing: the fork's ggml-hrx then looks for installed hrx and loomc packages "
        "(find_package(hrx CONFIG REQUIRED), ggml/src/ggml-hrx/CMakeLists.txt) instead of building hrx-system"),
    "amdclang": (
        "TheRock's amdclang is missing: hrx-system's AMDGPU driver (IREE_HAL_DRIVER_AMDGPU=ON, which the fork "
        "passes) needs a Clang-family compiler"),
}


def missed_requirements(text: str) -> list[str]:
    """The upstream requirements a failed hrx0 build shows it missed. Pure."""
    found = []
    if re.search(r'package configuration file provided by\s+"hrx"', text):
        found.append(MISSED["HRX_SOURCE_DIR"])
    if "requires the configured C compiler to be Clang-family" in " ".join(text.split()) or "missing: llama: " in text:
        found.append(MISSED["amdclang"])
    return found


def failure_report(out: subprocess.CompletedProcess, ws: Path) -> str:
    logs = "\n".join(p.read_text(errors="replace") for p in sorted(ws.rglob("*.log"))) if ws.exists() else ""
    missed = missed_requirements(out.stderr + "\n" + logs)
    head = "\n".join(f"upstream requirement missed: {m}" for m in missed) or "no known upstream requirement matched"
    return f"{head}\n--- onebit-build said:\n{out.stderr[-4000:]}"


def tree_files(name: str) -> dict[str, str]:
    root = STANDINS / name
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def hsa_library(dest: Path, *, distro: bool) -> Path:
    """A real shared library named like the HSA runtime: TheRock's, or a distribution's."""
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / LIBHSA
    flags = ["-DHSA_DISTRO"] if distro else []
    subprocess.run([shutil.which("cc") or "gcc", "-shared", "-fPIC", *flags, f"-Wl,-soname,{LIBHSA}", "-o", str(out),
                    str(STANDINS / "hsa" / "libhsa.c")], check=True)
    return out


def project(root: Path, s: dict, *, recipe_without: tuple[str, ...] = ()) -> Path:
    """A project folder with the REAL hrx0 recipe and pins that name the stand-ins at their
    commits; ``recipe_without`` drops those defines from the recipe (each must be there)."""
    (root / "recipes").mkdir(parents=True, exist_ok=True)
    recipe = (REPO / "recipes" / "hrx0.yaml").read_text()
    for define in recipe_without:
        line = re.compile(rf"^ +{re.escape(define)}: .*\n", re.M)
        assert len(line.findall(recipe)) == 1, f"the recipe has no single {define} define"
        recipe = line.sub("", recipe)
    (root / "recipes" / "hrx0.yaml").write_text(recipe)
    (root / "pins.yaml").write_text(
        "schema: 1\nsources:\n"
        f"  llama.cpp-hrx0:\n    url: https://example.invalid/llama.git\n    branch: 1bit/hrx-vulkan-patched\n"
        f"    commit: {s['llama.cpp-hrx0']}\n"
        f"  hrx-system-hrx0:\n    url: https://example.invalid/hrx-system.git\n    commit: {s['hrx-system-hrx0']}\n")
    return root


def make_project(tmp_path_factory) -> dict:
    """The stand-ins in real git repositories with bare mirrors, a project of the real recipe over
    them, a TheRock-shaped toolchain with TheRock's HSA runtime, and a distribution's one apart."""
    base = tmp_path_factory.mktemp("hrx0")
    repos, mirrors = base / "repos", base / "mirrors"
    s = {"llama.cpp-hrx0": commit(repos / "llama", tree_files("llama"), "llama.cpp fork stand-in (ggml-hrx)"),
         "hrx-system-hrx0": commit(repos / "hrx-system", tree_files("hrx-system"), "hrx-system stand-in")}
    bare(repos / "llama", mirrors, "llama.cpp-hrx0")
    bare(repos / "hrx-system", mirrors, "hrx-system-hrx0")
    tc = fake_toolchain(base / "therock")
    (tc / "lib" / LIBHSA).unlink()
    hsa_library(tc / "lib", distro=False)
    return {"s": s, "root": project(base / "proj", s), "tc": tc, "mirrors": mirrors, "ws": base / "ws", "base": base,
            "distro": hsa_library(base / "distro", distro=True)}


def cli(st: dict, *args: str, root: Path | None = None, ws: Path | None = None, env: dict | None = None):
    return run_cli(root or st["root"], "--workspace", str(ws or st["ws"]), "--mirror-dir", str(st["mirrors"]),
                   "--recipe", "hrx0", *args, env=env, timeout=600)


def list_devices(server: str, env_extra: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("IREE_HAL_AMDGPU_LIBHSA_PATH", "LD_LIBRARY_PATH")}
    return subprocess.run([server, "--list-devices"], capture_output=True, text=True, check=True,
                          env={**env, **env_extra}).stdout
