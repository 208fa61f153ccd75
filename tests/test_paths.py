"""Paths a user gives that cannot work: a file where a folder must be, a folder that cannot
be written, a name or a path the file system cannot hold. Each is one line naming the real
problem and the option to change, exit 2, before anything is built or written."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from onebit_build.cli import os_error

REPO = Path(__file__).resolve().parent.parent


def cli(*args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "onebit_build", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


def error_line(out: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in out.stderr, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, out.stderr
    return lines[0]


def test_prefix_that_is_a_file(tmp_path):
    prefix = tmp_path / "prefix"
    prefix.write_text("a file")
    out = cli("--workspace", str(tmp_path / "ws"), "install", "--prefix", str(prefix))
    assert out.returncode == 14, out.stderr
    assert error_line(out) == (f"error: --prefix {prefix} is a file, not a folder"
                               " (give --prefix a folder (it is created when missing))")
    assert not (tmp_path / "ws").exists()  # refused before the build


def test_prefix_below_a_file(tmp_path):
    (tmp_path / "f").write_text("a file")
    out = cli("--workspace", str(tmp_path / "ws"), "install", "--prefix", str(tmp_path / "f" / "opt"))
    assert out.returncode == 14 and f"cannot be made: {tmp_path / 'f'} is a file" in error_line(out)


def test_read_only_prefix_names_the_prefix_not_the_workspace(tmp_path):
    if os.geteuid() == 0 and subprocess.run(["setpriv", "--version"], capture_output=True).returncode != 0:
        pytest.skip("setpriv is needed to drop root's permission override")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    caps = "-dac_override,-dac_read_search"
    drop = ("setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}") if os.geteuid() == 0 else ()
    out = cli("--workspace", str(tmp_path / "ws"), "install", "--prefix", str(ro / "llama"), prefix=drop)
    assert out.returncode == 14, out.stderr
    line = error_line(out)
    assert f"--prefix {ro / 'llama'} is not writable (Permission denied at {ro})" in line
    assert "choose a writable --prefix" in line and "--workspace" not in line
    assert not (tmp_path / "ws").exists() and list(ro.iterdir()) == []


def test_bench_out_that_is_a_file(tmp_path):
    out_file = tmp_path / "results"
    out_file.write_text("earlier results")
    out = cli("--workspace", str(tmp_path / "ws"), "bench", "--out", str(out_file))
    assert out.returncode == 14, out.stderr
    assert error_line(out).startswith(f"error: --out {out_file} is a file, not a folder")
    assert out_file.read_text() == "earlier results"


def test_workspace_path_over_path_max(tmp_path):
    deep = tmp_path.joinpath(*["d" * 200] * 21)  # about 4,200 bytes
    out = cli("--workspace", str(deep), "--offline", "fetch")
    assert out.returncode == 2, out.stderr
    line = error_line(out)
    assert "--workspace: the path is" in line and "a path holds at most 4096" in line
    assert "give --workspace a shorter path" in line


def test_workspace_that_leaves_no_room_for_its_build_trees(tmp_path):
    deep = tmp_path.joinpath(*["d" * 200] * 16)  # about 3,200 bytes: fits, its build trees would not
    out = cli("--workspace", str(deep), "--offline", "fetch")
    assert out.returncode == 2 and "the workspace needs about 1024 more below it" in error_line(out)


def test_run_dir_name_over_255_bytes(tmp_path):
    out = cli("--workspace", str(tmp_path / "ws"), "--offline", "fetch", "--run-dir", str(tmp_path / ("r" * 300)))
    assert out.returncode == 2, out.stderr
    assert error_line(out).startswith("error: --run-dir: the name 'rrrrrrrrrrrrrrrrrrrrrrrr'... is 300 bytes long;"
                                      " a file name holds at most 255")
    assert not (tmp_path / "ws").exists()


def test_a_name_too_long_met_anywhere_else_is_named():
    err = os_error(OSError(errno.ENAMETOOLONG, "File name too long", "/x/" + "y" * 300))
    assert err.exit_code == 14 and str(err).startswith("file name too long at /x/yyy")
    assert "shorter --workspace" in str(err)
    err = os_error(OSError(errno.EACCES, "Permission denied", "/usr/local/llama"))
    assert err.exit_code == 14 and "--workspace" not in str(err)
