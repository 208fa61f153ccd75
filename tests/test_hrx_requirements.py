"""Each upstream requirement the strix-halo recipe meets is needed: without it the stand-ins'
build fails and says which one (the stand-ins and their fixtures: _hrx_standins.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from _support import run_cli
from onebit_build.checking.artifacts import parse_loombc_catalog
from onebit_build.core.errors import VerifyError
from onebit_build.checking.manifest import read_manifest
from _hrx_standins import (HSA_URL, MISSED, build, catalog_files, failure_report, hrx20_problem, make_project,
                           project)


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    return make_project(tmp_path_factory)


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
    # The pinned stack without surprises: each one, taken away, brings in a configure-time
    # download that nothing hands over (the tool passes FETCHCONTENT_FULLY_DISCONNECTED=ON).
    "LIBHRX_BUILD_HIP_BINDING": ("LIBHRX_BUILD_HIP_BINDING",),
    "IREE_ENABLE_LIBBACKTRACE": ("IREE_ENABLE_LIBBACKTRACE",),
    "AMDF_BUILD": ("AMDF_BUILD",),
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
