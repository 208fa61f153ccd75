"""The plan: toolchain resolution, the runtime environment, and --dry-run of the real recipe."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from _support import REPO, run_cli
from onebit_build.spec.recipe import Recipe, SmokeSpec, load_recipe
from onebit_build.spec.toolchain_spec import ToolchainSpec
from onebit_build.spec.pins import load_pins
from onebit_build.core.errors import ToolMissingError
from onebit_build.building.toolchain import join_lists, resolve_toolchain, runtime_env
from _hrx_standins import fake_toolchain

SPEC = ToolchainSpec(root="/opt/rocm-therock", root_env="ONEBIT_TOOLCHAIN_ROOT",
                     ar=("lib/llvm/bin/llvm-ar", "no-such-archiver-xyz"), libhsa=("lib/libhsa-runtime64.so.1",))


def test_toolchain_root_precedence(tmp_path):
    env = {"ONEBIT_TOOLCHAIN_ROOT": str(tmp_path / "from-env")}
    assert resolve_toolchain(SPEC, environ={}).root == Path("/opt/rocm-therock")
    tc = resolve_toolchain(SPEC, environ=env)
    assert tc.root == tmp_path / "from-env" and tc.root_from == "$ONEBIT_TOOLCHAIN_ROOT"
    tc = resolve_toolchain(SPEC, override=str(tmp_path / "flag"), environ=env)
    assert tc.root == tmp_path / "flag" and tc.root_from == "--toolchain-root"


def test_ar_and_libhsa_are_found_under_the_root_or_reported(tmp_path):
    root = fake_toolchain(tmp_path / "therock")
    tc = resolve_toolchain(SPEC, override=str(root), environ={})
    assert tc.ar == str(root / "lib/llvm/bin/llvm-ar")
    assert tc.libhsa == str(root / "lib/libhsa-runtime64.so.1")
    empty = resolve_toolchain(SPEC, override=str(tmp_path / "empty"), environ={})
    assert empty.ar is None and empty.libhsa is None
    with pytest.raises(ToolMissingError, match="no HSA runtime under") as e:
        empty.require("libhsa", "smoke.env.X")
    assert "IREE_HAL_AMDGPU_LIBHSA_PATH" in (e.value.hint or "")
    with pytest.raises(ToolMissingError, match="no archiver"):
        empty.require("ar", "component c")


def test_runtime_env_prefers_what_the_user_gave(tmp_path):
    root = fake_toolchain(tmp_path / "therock")
    recipe = Recipe(path=tmp_path / "r.yaml", name="r", description="", backends=("hrx",), components=(),
                    smoke=SmokeSpec(env=(("IREE_HAL_AMDGPU_LIBHSA_PATH", "${toolchain.libhsa}"), ("OTHER", "x"))),
                    toolchain=SPEC)
    tc = resolve_toolchain(SPEC, override=str(root), environ={})
    assert runtime_env(recipe, tc, environ={}) == (
        ("IREE_HAL_AMDGPU_LIBHSA_PATH", str(root / "lib/libhsa-runtime64.so.1")), ("OTHER", "x"))
    given = {"IREE_HAL_AMDGPU_LIBHSA_PATH": "/given/libhsa.so"}
    assert runtime_env(recipe, tc, environ=given)[0] == ("IREE_HAL_AMDGPU_LIBHSA_PATH", "/given/libhsa.so")
    missing = resolve_toolchain(SPEC, override=str(tmp_path / "empty"), environ={})
    with pytest.raises(ToolMissingError):
        runtime_env(recipe, missing, environ={})


def test_list_separator():
    assert join_lists("a|b|c", "|") == "a;b;c"
    assert join_lists("a|b", None) == "a|b"


def test_real_recipe_loads_in_reference_order():
    pins = load_pins(REPO / "pins.yaml")
    recipe = load_recipe(REPO / "recipes" / "strix-halo.yaml", pins)
    assert [c.name for c in recipe.components] == ["hrx-runtime", "loom-link", "llama"]
    assert recipe.component("llama").components_used() == {"hrx-runtime", "loom-link"}
    assert recipe.smoke.devices == ("HRX20", "Vulkan0")
    assert dict(recipe.smoke.reference_tok_s) == {"Vulkan0": 117.0, "HRX20": 34.0}
    assert recipe.model is not None and recipe.model.path_env and not recipe.model.sha256
    assert pins.sources["hrx-system"].before == "87e371596321dd426cbe0961ed32d5669038ca60"


def test_dry_run_prints_the_whole_plan_without_touching_anything(tmp_path):
    root = fake_toolchain(tmp_path / "therock")
    ws = tmp_path / "ws"
    out = run_cli(REPO, "--workspace", str(ws), "--hrx", "on", "--toolchain-root", str(root), "--dry-run",
                  env={"GIT_CONFIG_GLOBAL": "/dev/null", "http_proxy": "http://127.0.0.1:9",
                       "https_proxy": "http://127.0.0.1:9"})
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert not ws.exists(), "a dry run must not create the workspace"
    # Sources, pins and patches.
    for needle in ("hrx: https://github.com/ROCm/hrx.git @ 0bc22fb",
                   "hrx-system: https://github.com/ROCm/hrx-system.git @ 6743075f",
                   "must not descend from 87e371596321dd426cbe0961ed32d5669038ca60",
                   "llama.cpp-hrx: https://github.com/bong-water-water-bong/llama.cpp.git @ "
                   "3b33c8a93732180533e02f8c3f16291f1b8d7c24",
                   "patch 0001-libhrx-no-install-export-rules.patch",
                   "patch 0003-amdgpu-failed-pm4-probe-is-native-aql.patch",
                   f"patched tree: {ws}/src/llama.cpp-hrx-3b33c8a93732-"):
        assert needle in text, needle
    # Build order and every define of every component.
    assert text.index("1. hrx-runtime") < text.index("2. loom-link") < text.index("3. llama")
    pins = load_pins(REPO / "pins.yaml")
    recipe = load_recipe(REPO / "recipes" / "strix-halo.yaml", pins)
    # The defines as CMakeInit.txt sets them (the build configures with -C, not with -D).
    for comp in recipe.components:
        for key, _ in comp.defines:
            assert f"\n      {key}=" in text, key
    assert f"\n      CMAKE_C_COMPILER={root}/bin/amdclang\n" in text
    assert f"\n      CMAKE_AR={root}/lib/llvm/bin/llvm-ar\n" in text
    assert ("IREE_HAL_AMDGPU_TARGETS=gfx9-generic;gfx90a;gfx9-4-generic;gfx10-1-generic;gfx10-3-generic;"
            "gfx11-generic;gfx12-generic\n") in text
    assert f"hrx_DIR={ws}/build/strix-halo-hrx-runtime-<key>/onebit-prefix/cmake/hrx" in text
    assert (f"GGML_HRX2_LOOM_LINK_EXECUTABLE={ws}/build/strix-halo-loom-link-<key>"
            "/loom/src/loom/tools/loom-link/loom-link") in text
    assert "build key  not known yet: the configure-time download(s)" in text
    assert "--target libhrx_src_libhrx_hrx \\\n          loomc_shared \\\n" in text
    assert "--target llama-server \\\n          llama-bench\n" in text
    assert "configure recipes/strix-halo/hrx-config.cmake.in -> cmake/hrx/hrx-config.cmake" in text
    # Runtime.
    assert f"IREE_HAL_AMDGPU_LIBHSA_PATH={root}/lib/libhsa-runtime64.so.1" in text
    assert "devices  HRX20, Vulkan0" in text and "Vulkan0 117 tok/s, HRX20 34 tok/s" in text and "within 25%" in text
    assert "unsloth/Qwen3-0.6B-GGUF" in text and "$ONEBIT_HRX_MODEL" in text
    assert "problems a real run would meet" not in text


def test_dry_run_names_what_is_missing(tmp_path):
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--hrx", "on", "--toolchain-root", str(tmp_path / "none"),
                  "--dry-run", env={k: v for k, v in os.environ.items() if k != "IREE_HAL_AMDGPU_LIBHSA_PATH"})
    assert out.returncode == 0, out.stderr
    assert "problems a real run would meet" in out.stdout
    assert f"toolchain root {tmp_path}/none does not exist" in out.stdout
    assert "toolchain libhsa: not found" in out.stdout


RECIPES = sorted(p.stem for p in (REPO / "recipes").glob("*.yaml"))


def plan_json(ws: Path, recipe: str, *extra: str) -> dict:
    import json

    out = run_cli(REPO, "--workspace", str(ws), "--recipe", recipe, *extra, "plan", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("name", RECIPES)
def test_plan_json_is_what_the_builder_computes(name, tmp_path):
    """``plan --json`` gives each component's build key, folder, defines and CMakeInit.txt as
    the builder computes them from the request the build makes (builder.key_of,
    build_dir_for, configure_defines, init_cache_of), for every recipe, without building; a
    key that cannot be known before fetch says why and leaves no placeholder in its folder's
    place in the key line."""
    from onebit_build.building.builder import build_dir_for, configure_defines, init_cache_of, key_of
    from onebit_build.building.cache.compiler import resolve as resolve_cache
    from onebit_build.building.cache.request import CacheRequest
    from onebit_build.building.cmake import find_tools
    from onebit_build.core.workspace import Workspace
    from onebit_build.job.resolve import BuildInputs, component_builds, planned_tree

    ws = tmp_path / "ws"
    doc = plan_json(ws, name)
    pins = load_pins(REPO / "pins.yaml")
    recipe = load_recipe(REPO / "recipes" / f"{name}.yaml", pins)
    workspace = Workspace(root=ws)
    launcher = resolve_cache(CacheRequest())
    trees = {n: planned_tree(pins.get(n), workspace, REPO / "patches") for n in recipe.sources_in_order()}
    inputs = BuildInputs(trees=trees, downloaded={}, fields={}, build_root=workspace.build_dir, launcher=launcher,
                         tools=find_tools(), log=lambda n: tmp_path / n, recipes_dir=REPO / "recipes")
    planned = {c["name"]: c for c in doc["components"]}
    assert list(planned) == [c.name for c in recipe.components]
    if recipe.toolchain is not None:
        return  # its defines need the toolchain's fields: the stand-in tests build it (test_hrx_standins.py)
    for cb in component_builds(recipe, pins, inputs):
        got = planned[cb.name]
        toolchain, key, _ = key_of(cb.request, find_tools())
        bdir = build_dir_for(cb.request, key)
        assert got["key"] == key and got["build_dir"] == str(bdir) and not got["unknown"]
        assert [tuple(d) for d in got["defines"]] == list(configure_defines(cb.request, bdir))
        assert got["init_cache"] == init_cache_of(configure_defines(cb.request, bdir), launcher, cb.request.languages)


def test_default_plan_is_short_and_names_only_its_own_flags(tmp_path_factory):
    """The default recipe's plan: no CUDA, HIP or Vulkan define or launcher, no line over 120
    columns (in a workspace whose path is as long as the default one), the real build folder
    (no placeholder)."""
    import shutil
    import tempfile

    tmp_path = Path(tempfile.mkdtemp(prefix="ob-", dir="/tmp"))
    try:
        _check_default_plan(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _check_default_plan(tmp_path: Path) -> None:
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "plan")
    assert out.returncode == 0, out.stderr
    long = [ln for ln in out.stdout.splitlines() if len(ln) > 120]
    assert not long, long
    doc = plan_json(tmp_path / "ws", "default")
    comp = doc["components"][0]
    names = [d[0] for d in comp["defines"]] + [ln.split()[0] for ln in comp["init_cache"].splitlines()]
    assert not [n for n in names if any(w in n for w in ("CUDA", "HIP", "VULKAN"))], names
    assert "<key>" not in out.stdout and comp["key"] and comp["build_dir"].endswith(comp["key"][:16])
