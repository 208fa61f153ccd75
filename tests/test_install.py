"""The tool as a user installs it: a wheel built from this tree, installed into a fresh
virtual environment and run from an empty folder, finds its pins, recipes, patches,
references and prompts in the package itself."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from _support import REPO
from onebit_build.spec.recipe import load_recipe
from onebit_build.spec.pins import load_pins

# The project data the installed tool needs, as the repository holds it.
DATA_ITEMS = ("pins.yaml", "recipes", "patches", "references", "smoke/prompts", "smoke/eval")
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__",
                                    ".pytest_cache", "runs")


def repo_data_files() -> list[str]:
    """Every file of the project data, relative to the repository root."""
    out = []
    for item in DATA_ITEMS:
        src = REPO / item
        files = [src] if src.is_file() else [p for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        out += [p.relative_to(REPO).as_posix() for p in files]
    return sorted(out)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built as pip builds it (the build backend from the package index, isolated), from
    a copy of this tree so that no build folder lands in the checkout."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    shutil.copytree(REPO, src, ignore=NOT_SOURCE)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(base / "dist"), f"{src}/"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    (whl,) = (base / "dist").glob("onebit_build-*.whl")
    return whl


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh virtual environment holding the wheel. Its dependencies come from this test's
    environment (as --system-site-packages would give them), not from a checkout."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    vpy = venv / "bin" / "python"
    site = Path(subprocess.run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "zz-dependencies.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    # --ignore-installed: the test environment may hold this project already (an editable
    # install seen through the .pth above), and pip would then install nothing.
    out = subprocess.run([sys.executable, "-m", "pip", "--python", str(vpy), "install", "--no-deps", "--no-index",
                          "--ignore-installed", "-q", str(wheel)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return venv


def tool(venv: Path, cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the installed console script from ``cwd`` with a clean environment."""
    full = {k: v for k, v in os.environ.items()
            if k not in ("ONEBIT_ROOT", "ONEBIT_WORKSPACE", "ONEBIT_MIRROR_DIR", "PYTHONPATH")}
    full["PATH"] = f"{venv / 'bin'}{os.pathsep}{full.get('PATH', '')}"
    full["XDG_CACHE_HOME"] = str(cwd.parent / "cache")
    full.update(env or {})
    return subprocess.run([str(venv / "bin" / "onebit-build"), *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture()
def empty(tmp_path) -> Path:
    d = tmp_path / "empty"
    d.mkdir()
    return d


def data_dir(venv: Path) -> Path:
    (pkg,) = venv.glob("lib/python*/site-packages/onebit_build")
    return pkg / "data"


def test_wheel_carries_the_project_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    want = repo_data_files()
    assert "recipes/strix-halo/hrx-config.cmake.in" in want and "smoke/prompts/code.txt" in want
    missing = [f for f in want if f"onebit_build/data/{f}" not in names]
    assert missing == []
    with zipfile.ZipFile(wheel) as z:
        assert z.read("onebit_build/data/pins.yaml") == (REPO / "pins.yaml").read_bytes()
    # Only the project data, nothing else of the tree (no tests, no kernels/).
    assert not [n for n in names if n.startswith(("tests/", "onebit_build/data/kernels"))]


def test_installed_tool_dry_runs_every_recipe_from_an_empty_folder(installed, empty):
    data = data_dir(installed)
    pins = load_pins(REPO / "pins.yaml")
    recipes = sorted(p.stem for p in (REPO / "recipes").glob("*.yaml"))
    assert {"default", "strix-halo"} <= set(recipes)
    for name in recipes:
        out = tool(installed, empty, "--recipe", name, "--dry-run")
        assert out.returncode == 0, out.stderr
        assert f"plan for recipe {name}:" in out.stdout
        assert f"project    {data} (package, found by installed package)" in out.stdout
        recipe = load_recipe(REPO / "recipes" / f"{name}.yaml", pins)
        for src in {c.source for c in recipe.components}:
            assert f"{src}: {pins.get(src).url} @ {pins.get(src).commit}" in out.stdout
    hrx = tool(installed, empty, "--hrx", "on", "--dry-run")
    assert hrx.returncode == 0, hrx.stderr
    assert "plan for recipe strix-halo:" in hrx.stdout and pins.get("llama.cpp-hrx").commit in hrx.stdout
    assert "not available" not in hrx.stdout + hrx.stderr
    assert list(empty.iterdir()) == []


def test_installed_doctor_reads_the_packaged_pins(installed, empty):
    mirrors = empty.parent / "mirrors"
    (mirrors / "llama.cpp.git").mkdir(parents=True)
    out = tool(installed, empty, "doctor", "--offline", "--mirror-dir", str(mirrors))
    assert "pins file not found" not in out.stdout + out.stderr
    assert f"project data: {data_dir(installed)} (package" in out.stdout
    assert "source llama.cpp" in out.stdout and f"mirror {mirrors / 'llama.cpp.git'}" in out.stdout
    assert out.returncode == 0, out.stdout + out.stderr


def test_installed_version_and_recipes(installed, empty):
    data = data_dir(installed)
    digest = hashlib.sha256((REPO / "pins.yaml").read_bytes()).hexdigest()[:12]
    out = tool(installed, empty, "--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["onebit-build 0.1.0", f"pins.yaml sha256 {digest}",
                                       f"recipes from {data} (package, found by installed package)"]
    listed = tool(installed, empty, "recipes", "--json")
    assert listed.returncode == 0, listed.stderr
    doc = json.loads(listed.stdout)
    assert doc["data_from"] == "package" and doc["project_root"] == str(data)
    assert [r["name"] for r in doc["recipes"]] == sorted(p.stem for p in (REPO / "recipes").glob("*.yaml"))


def test_a_checkout_is_used_when_named_or_entered(installed, empty):
    for args, env, how in ((("--root", str(REPO)), {}, "--root"), ((), {"ONEBIT_ROOT": str(REPO)}, "$ONEBIT_ROOT")):
        out = tool(installed, empty, *args, "--version", env=env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines()[-1] == f"recipes from {REPO} (checkout, found by {how})"
    inside = tool(installed, REPO / "recipes", "--version")
    assert inside.stdout.splitlines()[-1] == f"recipes from {REPO} (checkout, found by current folder)"


def test_installed_data_is_not_written_to(installed, empty):
    out = tool(installed, empty, "--workspace", str(empty.parent / "ws"), "pins", "lock")
    assert out.returncode == 2
    assert "installed package" in out.stderr and "--root DIR" in out.stderr and "Traceback" not in out.stderr
