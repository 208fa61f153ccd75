"""The bundled sccache runs from a copy named by its sha256, so that its path (written into
every build folder) is the same from any installation of the tool."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from onebit_build.building.cache import compiler as cc
from onebit_build.building.cache.kept import file_digest, kept_path, kept_program

SCCACHE = cc.bundled_sccache()
pytestmark = pytest.mark.skipif(SCCACHE is None, reason="no bundled sccache next to this Python")


def installed(root: Path) -> Path:
    """A copy of the bundled sccache as another installation of the tool would have it."""
    (root / "bin").mkdir(parents=True)
    return Path(shutil.copy2(SCCACHE, root / "bin" / "sccache"))


def test_two_installations_give_one_path(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    first, second = installed(tmp_path / "a"), installed(tmp_path / "b")
    kept = kept_program(str(first), env)
    assert kept == kept_program(str(second), env) != str(first)
    assert Path(kept) == kept_path("sccache", file_digest(first), env)
    assert Path(kept).read_bytes() == first.read_bytes()
    out = subprocess.run([kept, "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("sccache "), out


def test_a_copy_that_is_not_the_same_bytes_is_replaced(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    program = installed(tmp_path / "a")
    kept = Path(kept_program(str(program), env))
    kept.unlink()  # another file put in its place (writing through the link would change the source too)
    kept.write_bytes(b"#!/bin/sh\necho planted\n")
    kept.chmod(0o755)
    assert kept_program(str(program), env) == str(kept)
    assert kept.read_bytes() == program.read_bytes()
    assert not [p for p in kept.parent.iterdir() if p.name != "sccache"]  # no temporary file left


def test_a_cache_folder_that_cannot_be_written_leaves_the_program_where_it_is(tmp_path):
    (tmp_path / "cache").write_text("a file where the folder should be")
    program = installed(tmp_path / "a")
    assert kept_program(str(program), {"XDG_CACHE_HOME": str(tmp_path / "cache")}) == str(program)


def test_the_launcher_found_is_the_kept_copy(tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    found = cc.find_programs(env)["sccache"]
    assert found == str(kept_path("sccache", file_digest(Path(SCCACHE)), env))


def test_on_one_file_system_the_kept_program_takes_no_space(tmp_path):
    program = installed(tmp_path / "a")
    kept = Path(kept_program(str(program), {"XDG_CACHE_HOME": str(tmp_path / "cache")}))
    assert kept.stat().st_ino == program.stat().st_ino  # a hard link: tmp_path is one file system
    program.unlink()  # the environment it came from is removed
    out = subprocess.run([str(kept), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("sccache "), out


def test_gc_removes_the_launchers_of_another_sccache_unless_one_runs(tmp_path):
    from _support import REPO, run_cli

    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    current = Path(kept_program(SCCACHE, env))
    tools = current.parent.parent
    old, running = tools / "sccache-0000000000000000", tools / "sccache-1111111111111111"
    for folder in (old, running):
        folder.mkdir()
        shutil.copy("/bin/sleep", folder / "sccache")  # a program of its own (no link): its bytes are freed
    (tmp_path / "ws").mkdir()
    proc = subprocess.Popen([str(running / "sccache"), "300"])
    try:
        dry = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "gc", "--dry-run", env=env)
        assert dry.returncode == 0, dry.stderr
        assert f"would remove {old} (" in dry.stderr and f"kept {running}: a running program" in dry.stderr
        assert str(current.parent) not in dry.stderr and old.is_dir()
        done = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "gc", env=env)
        assert done.returncode == 0, done.stderr
    finally:
        proc.kill()
        proc.wait()
    assert not old.exists() and running.is_dir() and current.is_file()
