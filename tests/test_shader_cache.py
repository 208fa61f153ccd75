"""The shader cache: the glslc launcher's decisions (pure), and the launcher itself on the real
glslc, called as ggml-vulkan's vulkan-shaders-gen calls it, in folders at different paths,
with a local folder and with a real Redis."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from _redis import RedisServer, free_port
from _support import REPO, run_cli
from onebit_build.building.shaders import glslc as gl
from onebit_build.building.shaders import glslc_json as gj
from onebit_build.building.shaders import session as shaders
from onebit_build.building.cache.compiler import Launcher
from onebit_build.building.cache.request import parse_url
from onebit_build.running.report import _cache_section

needs_glslc = pytest.mark.skipif(shutil.which("glslc") is None,
                                 reason="glslc is not installed (see system-packages.txt)")
needs_redis = pytest.mark.skipif(shutil.which("redis-server") is None,
                                 reason="redis-server is not installed (see system-packages.txt)")

CCACHE = Launcher(kind="ccache", program="/usr/bin/ccache")

# A shader with an include and a define, in the form of ggml's shaders.
SHADER = """\
#version 450
#extension GL_GOOGLE_include_directive : enable
#include "types.glsl"
layout(local_size_x = 64) in;
layout(binding = 0) buffer B { FLOAT_TYPE data[]; };
void main() { data[gl_GlobalInvocationID.x] = data[gl_GlobalInvocationID.x] * SCALE + OFFSET; }
"""
TYPES = "#define OFFSET 1.0\n"


def gen_argv(src: Path, out: Path, *defines: str) -> list[str]:
    """What vulkan-shaders-gen passes to glslc for one variant (after the program)."""
    return ["-fshader-stage=compute", "--target-env=vulkan1.2", str(src), "-o", str(out), "-O",
            "-MD", "-MF", str(out) + ".d", *defines]


# --------------------------------------------------------------------------- pure


def test_parse_maps_the_three_paths():
    job = gl.parse(gen_argv(Path("/a/x.comp"), Path("/b/x.spv"), "-DFLOAT_TYPE=float"))
    assert (job["input"], job["output"], job["depfile"]) == ("/a/x.comp", "/b/x.spv", "/b/x.spv.d")
    assert job["args"] == ["-fshader-stage=compute", "--target-env=vulkan1.2", "<in>", "-o", "<out>", "-O",
                           "-MD", "-MF", "<dep>", "-DFLOAT_TYPE=float"]


@pytest.mark.parametrize("argv", [
    ["-o", "-", "-fshader-stage=compute", "x.comp"],  # CMake's probes write to stdout
    ["x.comp"], ["-o", "x.spv"], ["a.comp", "b.comp", "-o", "x.spv"],
    ["-I", "/inc", "x.comp", "-o", "x.spv"], ["--unknown", "x.comp", "-o", "x.spv"],
    ["x.comp", "-o", "x.spv", "-MD"], ["x.comp", "-o", "x.spv", "-MF", "x.d"],
    ["x.comp", "-o", "x.spv", "-o", "y.spv"], ["x.comp", "-o", "x.spv", "-DA=1\nB"],
])
def test_anything_but_a_plain_compile_is_uncacheable(argv):
    with pytest.raises(gl.Uncacheable):
        gl.parse(argv)


def test_preprocess_drops_output_and_dependency_options():
    argv = gen_argv(Path("/a/x.comp"), Path("/b/x.spv"), "-DA=1")
    assert gl.preprocess_argv("glslc", argv, gl.parse(argv)) == [
        "glslc", "-E", "-fshader-stage=compute", "--target-env=vulkan1.2", "/a/x.comp", "-O", "-DA=1"]


def test_key_is_path_free_but_follows_source_defines_and_glslc():
    def key(folder: str, text: bytes, *defines: str, identity: str = "glslc 1") -> str:
        job = gl.parse(gen_argv(Path(folder) / "x.comp", Path("/out") / folder.strip("/") / "x.spv", *defines))
        text = text.replace(b"@", folder.encode())
        return gl.cache_key(identity, job, "preprocessed:" + gl.preprocessed_digest(job, text))

    pre = b'#line 1 "@/x.comp"\nvoid main(){}\n'
    assert key("/ws1/src", pre, "-DA=1") == key("/elsewhere/2/src", pre, "-DA=1")
    assert key("/ws1/src", pre, "-DA=1") != key("/ws1/src", pre, "-DA=2")
    assert key("/ws1/src", pre, "-DA=1") != key("/ws1/src", pre + b"//\n", "-DA=1")
    assert key("/ws1/src", pre, "-DA=1") != key("/ws1/src", pre, "-DA=1", identity="glslc 2")
    # With -g the SPIR-V names its source file: the path stays in the key.
    assert key("/ws1/src", pre, "-g") != key("/ws2/src", pre, "-g")


def test_include_closure_is_path_free_and_covers_every_included_file(tmp_path):
    def closure(root: Path, files: dict[str, str]) -> str | None:
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        return gl.include_closure(root / "x.comp")

    files = {"x.comp": '#include "a.glsl"\n#if 0\n  # include "sub/b.glsl" // unused here\n#endif\n',
             "a.glsl": "#define A 1\n", "sub/b.glsl": '#include "../a.glsl"\n#include "c.glsl"\n', "sub/c.glsl": "//\n"}
    first = closure(tmp_path / "one", files)
    assert first is not None and first == closure(tmp_path / "two" / "deeper", files)
    for name in files:  # a change in any file it can include, used or not, misses
        assert closure(tmp_path / f"changed-{name.replace('/', '-')}", {**files, name: files[name] + " "}) != first
    assert closure(tmp_path / "missing", {**files, "sub/b.glsl": '#include "nowhere.glsl"\n'}) != first
    assert closure(tmp_path / "macro", {**files, "a.glsl": "#include NAME\n"}) is None
    assert closure(tmp_path / "comment", {**files, "a.glsl": '#include "c.glsl" /* c */\n'}) is None


def test_entry_round_trip_maps_the_dependency_file():
    job1 = gl.parse(gen_argv(Path("/ws1/src/x.comp"), Path("/ws1/b/x.spv")))
    job2 = gl.parse(gen_argv(Path("/ws2/deep/src/x.comp"), Path("/ws2/b/x.spv")))
    dep = b"/ws1/b/x.spv: /ws1/src/x.comp /ws1/src/types.glsl\n"
    spv, dep2 = gl.unpack(gl.pack(b"\x03\x02\x23\x07spv", dep, job1), job2)
    assert spv == b"\x03\x02\x23\x07spv"
    assert dep2 == b"/ws2/b/x.spv: /ws2/deep/src/x.comp /ws2/deep/src/types.glsl\n"


def test_a_damaged_entry_is_refused():
    job = gl.parse(gen_argv(Path("/s/x.comp"), Path("/b/x.spv")))
    blob = bytearray(gl.pack(b"0123456789", b"/b/x.spv: /s/x.comp\n", job))
    blob[-25] ^= 1
    with pytest.raises(ValueError):
        gl.unpack(bytes(blob), job)
    with pytest.raises(ValueError):
        gl.unpack(b"junk", job)


@pytest.mark.parametrize("value", [
    None, True, False, 0, -7, 2**63, "", "plain", 'quote " back \\ slash', "tab\tnew\nline\x01\x7f",
    "caf\u00e9 \u2603 \U0001f600", [], [["x.comp", "ab12"], ["<types.glsl>", None]], ("a", ("b", None)),
    {"schema": 1, "glslc": "shaderc 2023.2-1\nglslang", "args": ["-O", "<in>"], "source": "includes:0f"},
    {"z": {"b": [1, 2], "a": None}, "a": ""},
])
def test_the_launchers_json_is_the_json_modules(value):
    """The launcher writes and reads JSON without importing json (a hit costs less): the text
    it writes, and so every cache key, is json.dumps(..., sort_keys=True)'s."""
    assert gj.dumps(value) == json.dumps(value, sort_keys=True)
    assert gj.loads(json.dumps(value, indent=1)) == json.loads(json.dumps(value))


@pytest.mark.parametrize("text", ["", "   ", '{"a": 1} {"b": 2}', '{"a": NaN}', "Infinity", '{"a": 1', "[1,]"])
def test_the_launcher_refuses_what_is_not_one_json_document(text):
    with pytest.raises(ValueError):
        gj.loads(text)


def test_on_only_with_a_compiler_cache_and_for_vulkan_builds(tmp_path):
    env = {"ONEBIT_SHADER_CACHE_DIR": str(tmp_path)}
    assert not shaders.plan_shader_cache(Launcher(kind="none"), glslc="/usr/bin/glslc", env=env).active
    assert not shaders.plan_shader_cache(CCACHE, glslc=None, env=env).active
    on = shaders.plan_shader_cache(CCACHE, glslc="/usr/bin/glslc", env=env, version="v")
    assert on.active and on.local == str(tmp_path) and on.describe()["backend"] == "local"
    assert shaders.wants_shaders((("GGML_VULKAN", "ON"),)) and not shaders.wants_shaders((("GGML_VULKAN", "OFF"),))
    assert shaders.prepare(CCACHE, tmp_path, (("GGML_CUDA", "ON"),)) is None


def test_the_redis_password_is_not_shown(tmp_path):
    ln = Launcher(kind="sccache", program="/x/sccache", url=parse_url("redis://u:hunter2@cache.example:6379/3"))
    env = {"ONEBIT_SHADER_CACHE_DIR": str(tmp_path)}
    cache = shaders.plan_shader_cache(ln, glslc="/usr/bin/glslc", env=env, version="v")
    assert "hunter2" not in str(cache.describe()) and cache.describe()["url"] == "redis://u@cache.example:6379/3"


# --------------------------------------------------------------------------- the real glslc


def tree(root: Path, shader: str = SHADER, types: str = TYPES) -> Path:
    src = root / "vulkan-shaders"
    src.mkdir(parents=True)
    (src / "x.comp").write_text(shader)
    (src / "types.glsl").write_text(types)
    return src


def launcher(build: Path, cache_dir: Path, redis: str | None = None) -> Path:
    ln = Launcher(kind="ccache", program="/usr/bin/ccache", url=parse_url(redis) if redis else None)
    env = {**os.environ, "ONEBIT_SHADER_CACHE_DIR": str(cache_dir)}
    return shaders.install(shaders.resolve(ln, env), build)


def compile_with(program: Path | str, src: Path, out: Path, *defines: str) -> subprocess.CompletedProcess[str]:
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = gen_argv(src / "x.comp", out, "-DFLOAT_TYPE=float", *defines)
    return subprocess.run([str(program), *argv], capture_output=True, text=True, timeout=300)


def stats(build: Path) -> tuple[int, int, int]:
    s, _ = shaders.read_stats(build)
    return s.hits, s.misses, s.errors


@needs_glslc
def test_two_paths_hit_and_give_the_bytes_glslc_gives(tmp_path):
    cache = tmp_path / "cache"
    src1, src2 = tree(tmp_path / "ws1"), tree(tmp_path / "other" / "place" / "ws2")
    b1, b2 = tmp_path / "ws1" / "build", tmp_path / "other" / "place" / "ws2" / "build"
    for src, b in ((src1, b1), (src2, b2)):
        done = compile_with(launcher(b, cache), src, b / "x.spv", "-DSCALE=2.0")
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert stats(b1) == (0, 1, 0) and stats(b2) == (1, 0, 0)
    # the launcher's code is compiled once per build folder, not at every call (Redis's: never here)
    compiled = {p.name.split(".")[0] for p in (b2 / "onebit-glslc" / "__pycache__").iterdir()}
    assert compiled == {"onebit_glslc", "onebit_glslc_json"}
    plain = compile_with("glslc", src2, tmp_path / "plain" / "x.spv", "-DSCALE=2.0")
    assert plain.returncode == 0
    assert (b1 / "x.spv").read_bytes() == (b2 / "x.spv").read_bytes() == (tmp_path / "plain" / "x.spv").read_bytes()
    assert (b2 / "x.spv").stat().st_mode & 0o777 == (tmp_path / "plain" / "x.spv").stat().st_mode & 0o777
    dep = (b2 / "x.spv.d").read_text()
    assert dep.split() == [f"{b2 / 'x.spv'}:", str(src2 / "x.comp"), str(src2 / "types.glsl")]


@needs_glslc
def test_an_include_it_cannot_follow_is_keyed_on_the_preprocessed_source(tmp_path):
    """The second form of the key (glslc -E, the source folder mapped): still path-free."""
    shader = SHADER.replace('#include "types.glsl"', '#include "types.glsl" /* the types */')
    cache = tmp_path / "cache"
    src1, src2 = tree(tmp_path / "ws1", shader), tree(tmp_path / "x" / "ws2", shader)
    assert gl.include_closure(src1 / "x.comp") is None
    b1, b2 = tmp_path / "ws1" / "build", tmp_path / "x" / "ws2" / "build"
    for src, b in ((src1, b1), (src2, b2)):
        assert compile_with(launcher(b, cache), src, b / "x.spv", "-DSCALE=2.0").returncode == 0
    assert stats(b1) == (0, 1, 0) and stats(b2) == (1, 0, 0)
    (src2 / "types.glsl").write_text("#define OFFSET 3.0\n")
    assert compile_with(launcher(b2, cache), src2, b2 / "y.spv", "-DSCALE=2.0").returncode == 0
    assert stats(b2) == (0, 1, 0)
    assert (b1 / "x.spv").read_bytes() == (b2 / "x.spv").read_bytes() != (b2 / "y.spv").read_bytes()


@needs_glslc
def test_a_changed_define_include_or_shader_misses(tmp_path):
    cache = tmp_path / "cache"
    src, b = tree(tmp_path / "ws"), tmp_path / "ws" / "build"
    prog = launcher(b, cache)
    assert compile_with(prog, src, b / "a.spv", "-DSCALE=2.0").returncode == 0
    assert compile_with(prog, src, b / "b.spv", "-DSCALE=2.0").returncode == 0
    assert stats(b) == (1, 1, 0)
    assert compile_with(prog, src, b / "c.spv", "-DSCALE=3.0").returncode == 0
    (src / "types.glsl").write_text("#define OFFSET 2.0\n")
    assert compile_with(prog, src, b / "d.spv", "-DSCALE=2.0").returncode == 0
    (src / "x.comp").write_text(SHADER.replace("* SCALE", "* SCALE * SCALE"))
    assert compile_with(prog, src, b / "e.spv", "-DSCALE=2.0").returncode == 0
    assert stats(b) == (1, 4, 0)
    assert len({(b / f"{n}.spv").read_bytes() for n in "acde"}) == 4
    assert (b / "a.spv").read_bytes() == (b / "b.spv").read_bytes()


@needs_glslc
def test_a_failing_shader_reports_as_glslc_does_and_is_not_stored(tmp_path):
    src, b = tree(tmp_path / "ws", shader=SHADER.replace("void main", "void broken main")), tmp_path / "ws" / "build"
    prog = launcher(b, tmp_path / "cache")
    ours, theirs = compile_with(prog, src, b / "x.spv"), compile_with("glslc", src, tmp_path / "plain" / "x.spv")
    assert ours.returncode == theirs.returncode != 0
    assert ours.stderr.replace(str(b), "B") == theirs.stderr.replace(str(tmp_path / "plain"), "B")
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


@needs_glslc
def test_an_unusable_cache_falls_back_to_glslc(tmp_path):
    src, b = tree(tmp_path / "ws"), tmp_path / "ws" / "build"
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder should be")
    done = compile_with(launcher(b, blocked), src, b / "x.spv", "-DSCALE=2.0")
    assert (done.returncode, done.stderr) == (0, "")
    assert compile_with("glslc", src, tmp_path / "plain" / "x.spv", "-DSCALE=2.0").returncode == 0
    assert (b / "x.spv").read_bytes() == (tmp_path / "plain" / "x.spv").read_bytes()
    assert stats(b)[2] >= 1


@needs_glslc
def test_a_damaged_entry_is_compiled_again(tmp_path):
    cache = tmp_path / "cache"
    src, b = tree(tmp_path / "ws"), tmp_path / "ws" / "build"
    prog = launcher(b, cache)
    assert compile_with(prog, src, b / "a.spv", "-DSCALE=2.0").returncode == 0
    (entry,) = [p for p in cache.rglob("*") if p.is_file()]
    entry.write_bytes(entry.read_bytes()[:-7])
    done = compile_with(prog, src, b / "b.spv", "-DSCALE=2.0")
    assert (done.returncode, done.stderr) == (0, "")
    assert (b / "a.spv").read_bytes() == (b / "b.spv").read_bytes()
    assert stats(b) == (0, 2, 1)


@needs_glslc
def test_no_value_reaches_a_shell(tmp_path):
    src, b = tree(tmp_path / "ws"), tmp_path / "ws" / "build"
    marker = tmp_path / "ran"
    hostile = (f"-DSCALE=2.0 /* $(touch {marker}) */", f"-DZ=`touch {marker}`;touch {marker}")
    done = compile_with(launcher(b, tmp_path / "cache"), src, b / "x.spv", *hostile)
    plain = compile_with("glslc", src, tmp_path / "plain" / "x.spv", *hostile)
    assert not marker.exists()
    assert done.returncode == plain.returncode
    assert done.stderr.replace(str(b), "B") == plain.stderr.replace(str(tmp_path / "plain"), "B")


@needs_glslc
@needs_redis
def test_redis_shares_entries_across_local_folders(tmp_path):
    redis = RedisServer(tmp_path / "redis").start()
    try:
        src1, src2 = tree(tmp_path / "m1"), tree(tmp_path / "m2" / "x")
        b1, b2 = tmp_path / "m1" / "build", tmp_path / "m2" / "x" / "build"
        one = launcher(b1, tmp_path / "local1", redis.url)
        assert compile_with(one, src1, b1 / "x.spv", "-DSCALE=2.0").returncode == 0
        assert redis.keys() == 1
        two = launcher(b2, tmp_path / "local2", redis.url)
        assert compile_with(two, src2, b2 / "x.spv", "-DSCALE=2.0").returncode == 0
        assert stats(b1) == (0, 1, 0) and stats(b2) == (1, 0, 0)
        assert (b2 / "onebit-glslc" / "stats.log").read_text() == "hit redis\n"
        assert (b1 / "x.spv").read_bytes() == (b2 / "x.spv").read_bytes()
    finally:
        redis.stop()


@needs_glslc
def test_redis_down_compiles_and_is_tried_once(tmp_path):
    src, b = tree(tmp_path / "ws"), tmp_path / "ws" / "build"
    prog = launcher(b, tmp_path / "local", f"redis://127.0.0.1:{free_port()}")
    for n, scale in enumerate(("2.0", "3.0", "4.0")):
        done = compile_with(prog, src, b / f"{n}.spv", f"-DSCALE={scale}")
        assert (done.returncode, done.stderr) == (0, "")
    lines = (b / "onebit-glslc" / "stats.log").read_text().splitlines()
    assert lines.count("miss") == 3 and sum(ln.startswith("error redis") for ln in lines) == 1


# --------------------------------------------------------------------------- plan, manifest, report


@needs_glslc
def test_the_plan_names_the_shader_cache_for_vulkan_only(tmp_path):
    env = {"ONEBIT_SHADER_CACHE_DIR": str(tmp_path / "sc"), "ONEBIT_COMPILER_CACHE": "ccache"}
    vk = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--recipe", "vulkan", "plan", "--json", env=env)
    assert vk.returncode == 0, vk.stderr
    doc = json.loads(vk.stdout)["shader_cache"]
    assert doc["launcher"] == "glslc-cache" and doc["backend"] == "local" and doc["cache_dir"] == str(tmp_path / "sc")
    none = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "--recipe", "vulkan", "--compiler-cache", "none", "plan",
                   env=env)
    assert "shader cache  none  (no compiler cache;" in none.stdout
    cpu = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "plan", env=env)
    assert "shader cache" not in cpu.stdout


def test_the_report_has_a_row_for_the_shader_cache():
    stats = {"requests": 1117, "hits": 1110, "misses": 7, "errors": 0, "not_cacheable": 7, "hit_rate": 0.9937}
    manifest = {"components": [{"name": "llama", "compiler_cache": {
        "launcher": "sccache", "version": "0.16.0", "backend": "local", "stats": None,
        "shader_cache": {"launcher": "glslc-cache", "backend": "local", "cache_dir": "/c/onebit-glslc",
                         "stats": stats}}}]}
    lines = _cache_section(manifest)
    assert "| llama | glslc-cache | local /c/onebit-glslc | 1117 | 1110 | 7 | 99% |  |" in lines


@needs_glslc
def test_prepare_points_cmake_at_the_launcher_or_back_at_glslc(tmp_path, monkeypatch):
    monkeypatch.setenv("ONEBIT_SHADER_CACHE_DIR", str(tmp_path / "sc"))
    vulkan = (("GGML_VULKAN", "ON"),)
    on = shaders.prepare(CCACHE, tmp_path / "b", vulkan)
    assert on is not None and on.cache.active
    ((name, script),) = on.defines
    assert name == "Vulkan_GLSLC_EXECUTABLE" and script == str(tmp_path / "b" / "onebit-glslc" / "glslc")
    assert os.access(script, os.X_OK) and (Path(script).parent / "glslc.json").stat().st_mode & 0o077 == 0
    off = shaders.prepare(Launcher(kind="none"), tmp_path / "b", vulkan)
    assert off is not None and not off.cache.active
    assert off.defines == (("Vulkan_GLSLC_EXECUTABLE", shutil.which("glslc")),)
    assert off.report() == {"launcher": "none", "reason": "no compiler cache"}


# --------------------------------------------------------------------------- through the tool


SHADER_PROJECT = {
    "CMakeLists.txt": """\
        cmake_minimum_required(VERSION 3.20)
        project(shaders C)
        find_package(Vulkan COMPONENTS glslc REQUIRED)
        set(spv ${CMAKE_BINARY_DIR}/x.spv)
        # the way vulkan-shaders-gen calls glslc
        add_custom_command(OUTPUT ${spv}
            COMMAND ${Vulkan_GLSLC_EXECUTABLE} -fshader-stage=compute --target-env=vulkan1.2
                    ${CMAKE_SOURCE_DIR}/vulkan-shaders/x.comp -o ${spv} -O -MD -MF ${spv}.d
                    -DFLOAT_TYPE=float -DSCALE=${SCALE}
            DEPENDS ${CMAKE_SOURCE_DIR}/vulkan-shaders/x.comp)
        add_custom_target(shaders ALL DEPENDS ${spv})
        """,
    "vulkan-shaders/x.comp": SHADER,
    "vulkan-shaders/types.glsl": TYPES,
}


def shader_tool_project(tmp_path: Path) -> tuple[Path, Path]:
    """A pinned source whose build compiles one shader through Vulkan_GLSLC_EXECUTABLE, and its
    recipe (GGML_VULKAN=ON: the tool's sign of a build with Vulkan shaders)."""
    from _support import bare_mirror, make_repo, project_tree

    commit = make_repo(tmp_path / "shaders-src", SHADER_PROJECT)
    mirrors = tmp_path / "mirrors"
    bare_mirror(tmp_path / "shaders-src", mirrors, "shaders")
    recipe = """\
        schema: 1
        name: shaders
        description: one compute shader compiled with glslc
        backends: [vulkan]
        components:
          - name: shaders
            source: shaders
            defines:
              GGML_VULKAN: "ON"
              SCALE: "2.0"
            targets: [shaders]
            outputs:
              spv: x.spv
        """
    pins = f"schema: 1\nsources:\n  shaders:\n    url: https://example.invalid/s.git\n    commit: {commit}\n"
    return project_tree(tmp_path / "proj", pins=pins, recipes={"shaders": recipe}), mirrors


@needs_glslc
def test_two_workspaces_share_shaders_through_the_tool(tmp_path):
    root, mirrors = shader_tool_project(tmp_path)
    env = {"ONEBIT_SHADER_CACHE_DIR": str(tmp_path / "sc"), "CCACHE_DIR": str(tmp_path / "ccache")}
    comps = []
    for ws in (tmp_path / "ws", tmp_path / "else" / "where" / "ws2"):
        out = run_cli(root, "--workspace", str(ws), "--mirror-dir", str(mirrors), "--recipe", "shaders",
                      "--compiler-cache", "ccache", "build", env=env)
        assert out.returncode == 0, out.stderr
        comps.append(json.loads((ws / "manifests" / "shaders.json").read_text())["components"][0])
    assert "1/1 shader cache hits" in out.stderr, out.stderr  # the second build's line
    one, two = (c["compiler_cache"]["shader_cache"] for c in comps)
    assert one["launcher"] == two["launcher"] == "glslc-cache" and one["cache_dir"] == str(tmp_path / "sc")
    assert (one["stats"]["hits"], one["stats"]["misses"]) == (0, 1)
    assert (two["stats"]["hits"], two["stats"]["misses"]) == (1, 0)
    assert comps[0]["outputs"][0]["sha256"] == comps[1]["outputs"][0]["sha256"]
    cache = (Path(comps[1]["build_dir"]) / "CMakeCache.txt").read_text()
    assert f"Vulkan_GLSLC_EXECUTABLE:STRING={comps[1]['build_dir']}/onebit-glslc/glslc" in cache
    out = run_cli(root, "--workspace", str(tmp_path / "ws3"), "--mirror-dir", str(mirrors), "--recipe", "shaders",
                  "--compiler-cache", "none", "build", env=env)
    assert out.returncode == 0, out.stderr
    third = json.loads((tmp_path / "ws3" / "manifests" / "shaders.json").read_text())["components"][0]
    assert third["compiler_cache"]["shader_cache"] == {"launcher": "none", "reason": "no compiler cache"}
    assert third["outputs"][0]["sha256"] == comps[0]["outputs"][0]["sha256"]


@needs_glslc
def test_a_glslc_that_is_gone_is_one_line(tmp_path):
    src, b = tree(tmp_path / "ws"), tmp_path / "ws" / "build"
    prog = launcher(b, tmp_path / "cache")
    settings = b / "onebit-glslc" / "glslc.json"
    conf = json.loads(settings.read_text())
    settings.write_text(json.dumps({**conf, "glslc": str(tmp_path / "no-such-glslc")}))
    done = compile_with(prog, src, b / "x.spv", "-DSCALE=2.0")
    assert done.returncode == 127 and done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"error: cannot run glslc {tmp_path / 'no-such-glslc'}: ")
