"""The libraries a binary loads, read from real ELF files compiled here with the system
compiler: a program that needs liba, which needs libb, both in a build folder."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from types import SimpleNamespace

from onebit_build.building.elfdeps import build_tree_libraries, copy_libraries, outside_loads, read_elf
from onebit_build.distribution.install import install_tree
from onebit_build.core.errors import BuildError

CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler on this machine")


def compile_tree(build: Path, *, origin: bool) -> Path:
    """build/b/libb.so.1, build/a/liba.so.1 (needs libb) and build/bin/prog (needs liba), each
    with a run path naming the build folders, plus $ORIGIN when ``origin``."""
    for d in ("a", "b", "bin"):
        (build / d).mkdir(parents=True, exist_ok=True)
    extra = ["-Wl,-rpath,$ORIGIN"] if origin else []
    (build / "b.c").write_text("int b(void) { return 2; }\n")
    (build / "a.c").write_text("int b(void);\nint a(void) { return b() + 1; }\n")
    (build / "p.c").write_text('#include <stdio.h>\nint a(void);\nint main(void) { printf("%d\\n", a()); return 0; }\n')
    run = [CC, "-fPIC", "-Wl,--enable-new-dtags"]
    subprocess.run(
        [*run, "-shared", "-Wl,-soname,libb.so.1", "-o", build / "b" / "libb.so.1", build / "b.c", *extra], check=True
    )
    subprocess.run(
        [
            *run,
            "-shared",
            "-Wl,-soname,liba.so.1",
            "-o",
            build / "a" / "liba.so.1",
            build / "a.c",
            f"-L{build / 'b'}",
            "-l:libb.so.1",
            f"-Wl,-rpath,{build / 'b'}",
            *extra,
        ],
        check=True,
    )
    subprocess.run(
        [
            *run,
            "-o",
            build / "bin" / "prog",
            build / "p.c",
            f"-L{build / 'a'}",
            "-l:liba.so.1",
            f"-Wl,-rpath,{build / 'a'}",
            *extra,
        ],
        check=True,
    )
    return build / "bin" / "prog"


def test_needed_libraries_are_found_through_the_run_paths(tmp_path):
    prog = compile_tree(tmp_path / "build", origin=False)
    info = read_elf(prog)
    assert info is not None and "liba.so.1" in info.needed and str(tmp_path / "build" / "a") in info.runpath
    assert read_elf(tmp_path / "build" / "a.c") is None  # not an ELF file
    found = build_tree_libraries([prog], tmp_path / "build")
    # libc comes from the system, not from the build folder: it is not carried.
    assert found == {
        "liba.so.1": tmp_path / "build" / "a" / "liba.so.1",
        "libb.so.1": tmp_path / "build" / "b" / "libb.so.1",
    }


def _install(build: Path, prog: Path, prefix: Path) -> list[Path]:
    manifest = build / "build-manifest.json"
    manifest.write_text("{}")
    builds = [SimpleNamespace(outputs=[SimpleNamespace(name="prog", path=prog)], build_dir=build)]
    return install_tree(builds, manifest, prefix)


def test_a_tree_with_origin_runs_after_the_build_folder_is_gone(tmp_path):
    build = tmp_path / "build"
    prog = compile_tree(build, origin=True)
    files = _install(build, prog, tmp_path / "prefix")
    tree = tmp_path / "prefix" / "bin"
    assert sorted(p.name for p in files if p.parent == tree) == ["liba.so.1", "libb.so.1", "prog"]
    assert outside_loads(tree, build) == []
    shutil.rmtree(build)
    assert subprocess.run([str(tree / "prog")], capture_output=True, text=True, check=True).stdout == "3\n"


def test_a_tree_without_origin_is_refused_naming_the_library(tmp_path):
    build = tmp_path / "build"
    prog = compile_tree(build, origin=False)
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy2(prog, tree / "prog")
    copy_libraries(build_tree_libraries([prog], build), tree)
    assert outside_loads(tree, build) == [
        f"liba.so.1: libb.so.1 -> {build / 'b' / 'libb.so.1'}",
        f"prog: liba.so.1 -> {build / 'a' / 'liba.so.1'}",
    ]
    with pytest.raises(BuildError) as exc:
        _install(build, prog, tmp_path / "prefix")
    assert "still load from a build folder" in str(exc.value) and "CMAKE_BUILD_RPATH=$ORIGIN" in exc.value.hint
    assert not (tmp_path / "prefix").exists()  # nothing installed


