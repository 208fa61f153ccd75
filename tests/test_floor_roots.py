"""The runtime floor on real systems: Debian roots made by ``debootstrap --variant=minbase``
(no compiler, no build tools), kept between runs. A Debian 11 root is refused the suite's
default build, pulled from a real local registry, before a file is written, and the real
dynamic loader in that root agrees; a bare root of this machine's own release is told the
packages it lacks, gets exactly them from apt, then runs the installed server and passes
``smoke`` with the recipe's model."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from _support import REPO, one_line_error, run_cli, shared_from_user
from conftest import workspace_for_tests
from test_oci_default import published, registry  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.slow]

MIRROR = "http://deb.debian.org/debian"
ROOTS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "onebit-build-test-roots"


def codename() -> str:
    text = Path("/etc/os-release").read_text()
    m = re.search(r"^VERSION_CODENAME=\"?(\w+)", text, re.M)
    if m is None or "ID=debian" not in text:
        pytest.skip("this machine is not Debian: no root of its own release to make")
    return m.group(1)


def debian_root(suite: str, tmp_path: Path) -> Path:
    """A fresh copy of a minbase root of ``suite`` (made once with debootstrap, then kept)."""
    if os.geteuid() != 0 or shutil.which("debootstrap") is None or shutil.which("chroot") is None:
        pytest.skip("making a Debian root needs root and debootstrap (system-packages.txt)")
    kept = ROOTS / suite
    if not (kept / ".complete").exists():
        work = ROOTS / f".{suite}.tmp"
        shutil.rmtree(work, ignore_errors=True)
        ROOTS.mkdir(parents=True, exist_ok=True)
        made = subprocess.run(["debootstrap", "--variant=minbase", suite, str(work), MIRROR], capture_output=True,
                              text=True, timeout=1800)
        assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
        shutil.rmtree(kept, ignore_errors=True)
        work.rename(kept)
        (kept / ".complete").touch()
    copy = tmp_path / suite
    subprocess.run(["cp", "-a", str(kept), str(copy)], check=True, timeout=600)
    return copy


def in_root(root: Path, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``argv`` run inside ``root`` (with /proc mounted there, as a booted system has it)."""
    subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
    try:
        return subprocess.run(["chroot", str(root), *argv], capture_output=True, text=True, timeout=timeout)
    finally:
        subprocess.run(["umount", str(root / "proc")], check=True)


def test_a_debian_11_root_refuses_the_default_build_before_a_file_is_written(published, registry,  # noqa: F811
                                                                             llama_server, tmp_path):
    root = debian_root("bullseye", tmp_path)
    prefix = root / "opt" / "llama"
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "install", "--from", registry.ref("llama"),
                  "--prefix", str(prefix), "--system-root", str(root))
    line = one_line_error(out)
    assert out.returncode == 16, out.stderr
    assert f"the system in {root} cannot run this build: " in line
    assert re.search(r"libc\.so\.6 lacks GLIBC_2\.3[4-9] \(the newest it has is GLIBC_2\.30\)", line), line
    assert "libssl.so.3 is missing" in line and "use a newer system (glibc 2.3" in line
    assert not prefix.exists()
    # The real loader of that system refuses the same files, at a library the refusal named.
    copied = root / "opt" / "copied"
    shutil.copytree(llama_server.parent, copied, symlinks=True)
    ran = in_root(root, "/opt/copied/llama-server", "--version", timeout=60)
    assert ran.returncode == 127, ran.stderr
    lib = re.search(r"error while loading shared libraries: (\S+):", ran.stderr)
    assert lib is not None and f"{lib.group(1)} is missing" in line, ran.stderr


def test_a_bare_root_runs_the_installed_server_with_the_packages_it_was_told(llama_server, gemma_model, tmp_path):
    root = debian_root(codename(), tmp_path)
    assert not [p for p in ("usr/bin/gcc", "usr/bin/cc", "usr/bin/cmake", "usr/bin/python3") if (root / p).exists()]
    ws, prefix = workspace_for_tests(), root / "opt" / "llama"
    install = ("--workspace", str(ws), *shared_from_user(ws), "install", "--prefix", str(prefix),
               "--system-root", str(root))
    out = run_cli(REPO, *install)
    assert out.returncode == 16 and not prefix.exists(), out.stderr
    m = re.search(r"\(install them: apt-get install ([a-z0-9+. -]+)\)$", one_line_error(out))
    assert m is not None, out.stderr
    wanted = m.group(1).split()
    got = in_root(root, "apt-get", "install", "-y", "-q", "--no-install-recommends", *wanted, timeout=900)
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
    out = run_cli(REPO, *install)
    assert out.returncode == 0, out.stderr
    listed = (prefix / "share" / "onebit-build" / "runtime-packages.txt").read_text()
    names = [ln.split()[0] for ln in listed.splitlines() if not ln.startswith("#")]
    assert set(wanted) <= set(names) and f"system packages it needs: {' '.join(names)}" in out.stderr
    # The server runs in the root: its model where the smoke names it, a launcher that enters the root.
    model = root / str(gemma_model).lstrip("/")
    model.parent.mkdir(parents=True, exist_ok=True)
    os.link(gemma_model, model) if gemma_model.stat().st_dev == root.stat().st_dev else shutil.copy2(gemma_model, model)
    launcher = tmp_path / "llama-server-in-root"
    launcher.write_text(f"#!/bin/sh\nexec chroot {root} /opt/llama/bin/llama-server \"$@\"\n")
    launcher.chmod(0o755)
    subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
    try:
        smoke = run_cli(REPO, "--workspace", str(tmp_path / "ws-smoke"), "--model", str(gemma_model), "smoke",
                        "--server", str(launcher))
    finally:
        subprocess.run(["umount", str(root / "proc")], check=True)
    assert smoke.returncode == 0, smoke.stderr[-3000:]
    assert re.search(r"smoke PASS: \d+/\d+ checks", smoke.stderr + smoke.stdout), smoke.stderr[-2000:]
