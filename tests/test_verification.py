"""Verification runs: the pure parts (answers, provenance, verdict, report, JUnit), resolving
--working on real folders, and provenance read from real live processes (the speed part:
test_verify_run_speed.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from onebit_build.checking import manifest as manifest_mod
from onebit_build.checking.artifacts import Artifact, ArtifactSet
from onebit_build.checking.compare import compare_sets
from onebit_build.core.errors import ConfigError
from onebit_build.core.fsutil import sha256_file
from onebit_build.verify_run import answers, mapped_files as provenance, report, speed, verdict, working
from onebit_build.running.junit import Case, junit_xml, write_junit

from _support import speed_measures

# --------------------------------------------------------------------------- answers


def test_first_differing_token():
    assert answers.first_differing_token((1, 2, 3), (1, 2, 3)) is None
    assert answers.first_differing_token((1, 2, 3), (1, 5, 3)) == 1
    assert answers.first_differing_token((1, 2), (1, 2, 3)) == 2


def test_differing_answers_name_the_first_token_and_the_shared_text():
    new = answers.Answer(text=" Paris, the city of love", tokens=(7, 8, 9, 10), pieces=(" Paris", ",", " the", " city"))
    old = answers.Answer(text=" Paris, France", tokens=(7, 8, 11), pieces=(" Paris", ",", " France"))
    c = answers.compare("CPU", "landmark", new=new, working=old)
    assert not c.same
    assert c.difference == "token 2 after ' Paris,': new ' the' (id 9), working ' France' (id 11)"
    same = answers.compare("CPU", "landmark", new=old, working=old)
    assert same.same and same.difference == ""


def test_answer_without_tokens_falls_back_to_characters_and_errors_fail():
    c = answers.compare("CPU", "p", new=answers.Answer(text="abcX"), working=answers.Answer(text="abcY"))
    assert c.difference == "character 3 after 'abc': new 'X', working 'Y'"
    c = answers.compare("CPU", "p", new=answers.Answer(text="", error="server exited"),
                        working=answers.Answer(text="x"))
    assert not c.same and c.difference == "new: server exited"
    ended = answers.describe(answers.Answer(text="a", tokens=(1,)),
                             answers.Answer(text="ab", tokens=(1, 2), pieces=("a", "b")))
    assert "new (the answer ended), working 'b' (id 2)" in ended


# --------------------------------------------------------------------------- provenance (pure)

MAPS = textwrap.dedent("""\
    55d0c0a00000-55d0c0a01000 r--p 00000000 fe:00 100 /b/bin/llama-server
    55d0c0a01000-55d0c0a02000 r-xp 00001000 fe:00 100 /b/bin/llama-server
    7f0000000000-7f0000100000 r-xp 00000000 fe:00 201 /b/bin/libggml-base.so.0.25.3
    7f0000100000-7f0000200000 r-xp 00000000 08:01 301 /usr/lib/x86_64-linux-gnu/libggml.so.0
    7f0000200000-7f0000300000 r-xp 00000000 fe:00 202 /b/bin/libllama.so.0.5.0 (deleted)
    7f0000300000-7f0000400000 r-xp 00000000 08:01 400 /usr/lib/x86_64-linux-gnu/libc.so.6
    7f0000400000-7f0000401000 rw-p 00000000 00:00 0
    7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]
    7f0000500000-7f0000600000 r-xp 00000000 fe:00 203 /b/dir with space/libmtmd.so.0.5.0
    """)


def test_parse_maps_lists_each_file_once():
    files = provenance.parse_maps(MAPS)
    paths = [f.path for f in files]
    assert paths == ["/b/bin/llama-server", "/b/bin/libggml-base.so.0.25.3", "/usr/lib/x86_64-linux-gnu/libggml.so.0",
                     "/b/bin/libllama.so.0.5.0", "/usr/lib/x86_64-linux-gnu/libc.so.6",
                     "/b/dir with space/libmtmd.so.0.5.0"]
    assert files[1].device == (0xFE, 0) and files[1].inode == 201
    assert files[3].deleted and not files[1].deleted


def test_judge_finds_system_deleted_changed_and_replaced_files():
    expected = {"/b/bin/llama-server": "a" * 64, "/b/bin/libggml-base.so.0.25.3": "b" * 64,
                "/b/bin/libllama.so.0.5.0": "c" * 64, "/b/dir with space/libmtmd.so.0.5.0": "d" * 64}
    on_disk = {
        "/b/bin/llama-server": provenance.OnDisk(sha256="a" * 64, device=(0xFE, 0), inode=100),
        "/b/bin/libggml-base.so.0.25.3": provenance.OnDisk(sha256="e" * 64, device=(0xFE, 0), inode=201),
        "/b/bin/libllama.so.0.5.0": provenance.OnDisk(sha256="c" * 64, device=(0xFE, 0), inode=999),
        "/b/dir with space/libmtmd.so.0.5.0": provenance.OnDisk(sha256="d" * 64, device=(0xFE, 0), inode=999),
    }
    judged = provenance.judge(provenance.parse_maps(MAPS), executable="/b/bin/llama-server", expected=expected,
                              on_disk=on_disk)
    checks = {Path(c.path).name: c for c in judged}
    assert "libc.so.6" not in checks  # not a library provenance judges
    assert checks["llama-server"].status == provenance.OWN
    assert checks["libggml-base.so.0.25.3"].status == provenance.CHANGED
    assert checks["libggml.so.0"].status == provenance.FOREIGN
    assert checks["libllama.so.0.5.0"].status == provenance.REPLACED  # deleted since mapped
    assert checks["libmtmd.so.0.5.0"].status == provenance.REPLACED  # another inode at the path now


def test_judge_requires_the_executable_among_the_mapped_files():
    checks = provenance.judge((), executable="/b/bin/llama-server", expected={}, on_disk={})
    assert [c.status for c in checks] == [provenance.UNREADABLE]


# --------------------------------------------------------------------------- provenance (live processes)

LIB_C = "int ggml_answer(void) { return 42; }\n"
MAIN_C = textwrap.dedent("""\
    #include <stdio.h>
    #include <unistd.h>
    int ggml_answer(void);
    int main(void) { printf("%d\\n", ggml_answer()); fflush(stdout); sleep(30); return 0; }
    """)


@pytest.fixture(scope="module")
def tiny_build(tmp_path_factory) -> Path:
    """A real little "build": bin/llama-server linked (rpath $ORIGIN) to bin/libggml-base.so."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    root = tmp_path_factory.mktemp("tiny-build")
    src = root / "src"
    src.mkdir()
    (src / "lib.c").write_text(LIB_C)
    (src / "main.c").write_text(MAIN_C)
    bin_dir = root / "bin"
    bin_dir.mkdir()
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(bin_dir / "libggml-base.so"), str(src / "lib.c")], check=True)
    subprocess.run([cc, "-o", str(bin_dir / "llama-server"), str(src / "main.c"), f"-L{bin_dir}", "-lggml-base",
                    "-Wl,-rpath,$ORIGIN", "-Wl,--enable-new-dtags"], check=True)
    return root


def _start(server: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    p = subprocess.Popen([str(server)], stdout=subprocess.PIPE, env={**os.environ, **(env or {})})
    assert p.stdout is not None and p.stdout.readline().strip() == b"42"  # it runs and has mapped its libraries
    return p


def _expected(folder: Path) -> dict[str, str]:
    return {str(folder / "bin" / n): sha256_file(folder / "bin" / n) for n in ("llama-server", "libggml-base.so")}


def test_live_process_with_its_own_libraries_passes(tiny_build):
    p = _start(tiny_build / "bin" / "llama-server")
    try:
        res = provenance.inspect_process(p.pid, side="new", device="CPU", expected=_expected(tiny_build))
    finally:
        p.kill()
        p.wait()
    assert res.ok, res.summary()
    assert {Path(c.path).name for c in res.checks} == {"llama-server", "libggml-base.so"}
    assert res.summary() == "new on CPU: the executable and 1 mapped library are the build's own"


def test_library_path_from_another_build_fails(tiny_build, tmp_path):
    other = tmp_path / "other-build"
    other.mkdir()
    shutil.copy2(tiny_build / "bin" / "libggml-base.so", other / "libggml-base.so")  # the same bytes, another build
    p = _start(tiny_build / "bin" / "llama-server", env={"LD_LIBRARY_PATH": str(other)})
    try:
        res = provenance.inspect_process(p.pid, side="working", device="CPU", expected=_expected(tiny_build))
    finally:
        p.kill()
        p.wait()
    assert not res.ok
    (bad,) = res.failures
    assert bad.status == provenance.FOREIGN and bad.path == str(other / "libggml-base.so")
    assert f"LD_LIBRARY_PATH={other}" in res.notes


def test_library_changed_after_the_manifest_fails(tiny_build, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_build, copy)
    expected = _expected(copy)
    lib = copy / "bin" / "libggml-base.so"
    with open(lib, "ab") as f:  # same inode, other bytes
        f.write(b"\0")
    p = _start(copy / "bin" / "llama-server")
    try:
        res = provenance.inspect_process(p.pid, side="new", device="CPU", expected=expected)
    finally:
        p.kill()
        p.wait()
    (bad,) = res.failures
    assert bad.status == provenance.CHANGED and "the manifest records" in bad.detail


def test_a_gone_process_cannot_be_inspected():
    p = subprocess.Popen(["true"])
    p.wait()
    res = provenance.inspect_process(p.pid, side="new", device="CPU", expected={})
    assert not res.ok and "could not be read" in res.error


# --------------------------------------------------------------------------- resolving --working


def fake_build(folder: Path, *, recipe: str = "default", recorded: Path | None = None) -> Path:
    """A build folder as onebit-build leaves it: bin/llama-server, a library and the
    manifest (which records ``recorded`` as the build folder, default ``folder``)."""
    recorded = recorded or folder
    (folder / "bin").mkdir(parents=True)
    server = folder / "bin" / "llama-server"
    server.write_bytes(b"#!/bin/sh\nexit 0\n")
    server.chmod(0o755)
    (folder / "bin" / "libggml.so.1").write_bytes(b"lib")
    (folder / "CMakeCache.txt").write_text("")
    doc = {
        "kind": manifest_mod.KIND, "schema": manifest_mod.SCHEMA, "recipe": {"name": recipe},
        "components": [{"name": "llama", "build_dir": str(recorded), "outputs": [
            {"name": "llama-server", "path": str(recorded / "bin" / "llama-server"),
             "sha256": sha256_file(server), "size": 1},
            {"name": "libggml.so.1", "path": str(recorded / "bin" / "libggml.so.1"), "sha256": "f" * 64, "size": 3},
        ]}],
    }
    (folder / working.MANIFEST).write_text(json.dumps(doc))
    return folder


def test_working_build_folder_and_its_server(tmp_path):
    b = fake_build(tmp_path / "b")
    got = working.resolve_working(b, recipe="default")
    assert got.folder == b and got.server == b / "bin" / "llama-server" and got.given_as == working.BUILD_FOLDER
    by_server = working.resolve_working(b / "bin" / "llama-server", recipe="default")
    assert by_server.folder == b and by_server.given_as == working.SERVER_FILE
    assert got.expected_files[str(b / "bin" / "libggml.so.1")] == "f" * 64


def test_copied_build_folder_is_anchored_where_it_is(tmp_path):
    b = fake_build(tmp_path / "copy", recorded=tmp_path / "original")
    got = working.resolve_working(b, recipe="default")
    assert got.server == b / "bin" / "llama-server"
    assert set(got.expected_files) == {str(b / "bin" / "llama-server"), str(b / "bin" / "libggml.so.1")}


def test_install_prefix_and_its_server(tmp_path):
    b = fake_build(tmp_path / "build")
    prefix = tmp_path / "prefix"
    (prefix / "share" / "onebit-build").mkdir(parents=True)
    shutil.copytree(b / "bin", prefix / "bin")
    shutil.copy2(b / working.MANIFEST, prefix / "share" / "onebit-build" / working.MANIFEST)
    got = working.resolve_working(prefix, recipe="default")
    assert got.given_as == working.INSTALL_PREFIX and got.installed and got.server == prefix / "bin" / "llama-server"
    assert set(got.expected_files) == {str(prefix / "bin" / "llama-server"), str(prefix / "bin" / "libggml.so.1")}
    by_server = working.resolve_working(prefix / "bin" / "llama-server", recipe="default")
    assert by_server.folder == prefix and by_server.given_as == working.SERVER_FILE and by_server.installed


def test_run_folder_names_its_build(tmp_path):
    b = fake_build(tmp_path / "build")
    run = tmp_path / "runs" / "20260101-000000-default-build"
    run.mkdir(parents=True)
    shutil.copy2(b / working.MANIFEST, run / working.MANIFEST)
    got = working.resolve_working(run, recipe="default")
    assert got.given_as == working.RUN_FOLDER and got.folder == b and got.manifest_path == run / working.MANIFEST
    shutil.rmtree(b)
    with pytest.raises(ConfigError, match="no longer exists"):
        working.resolve_working(run, recipe="default")


def _touch(path: Path) -> Path:
    path.write_text("")
    return path


@pytest.mark.parametrize("make, message", [
    (lambda t: t / "missing", "no such file or folder"),
    (lambda t: t, "not a build: the folder holds no build-manifest.json"),
    (lambda t: _touch(t / "x.txt"), "no build-manifest.json in the folders above"),
])
def test_not_a_build_is_refused_in_one_line(tmp_path, make, message):
    with pytest.raises(ConfigError) as exc:
        working.resolve_working(make(tmp_path), recipe="default")
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert exc.value.exit_code == 2 and "give the working build's folder" in str(exc.value)


def test_build_of_another_recipe_is_refused(tmp_path):
    b = fake_build(tmp_path / "b", recipe="vulkan")
    with pytest.raises(ConfigError) as exc:
        working.resolve_working(b, recipe="default")
    assert "a build of recipe 'vulkan', not 'default'" in str(exc.value) and "pass --recipe vulkan" in str(exc.value)


def test_broken_manifest_and_missing_server_are_refused(tmp_path):
    b = fake_build(tmp_path / "b")
    (b / "bin" / "llama-server").unlink()
    with pytest.raises(ConfigError, match="not a build|is missing"):
        working.resolve_working(b, recipe="default")
    (b / working.MANIFEST).write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        working.resolve_working(b, recipe="default")
    (b / working.MANIFEST).write_text(json.dumps({"kind": "something-else"}))
    with pytest.raises(ConfigError, match="not a build manifest"):
        working.resolve_working(b, recipe="default")


def test_same_build_is_detected(tmp_path):
    b = fake_build(tmp_path / "b")
    x = working.resolve_working(b, recipe="default")
    assert working.same_build(x, working.resolve_working(b / "bin" / "llama-server", recipe="default"))


# --------------------------------------------------------------------------- verdict and report


def _set(names_hashes: dict[str, str], facts: dict[str, str] | None = None) -> ArtifactSet:
    return ArtifactSet(kind="spirv", root="/x",
                       items=tuple(Artifact(name=n, size=4, sha256=h) for n, h in names_hashes.items()),
                       facts=facts or {"glslc": "shaderc 2023.2-1"})


def _numerics(*, kld: float = 0.0) -> verdict.Part:
    figures = {"positions": 164, "ppl": 10.0, "ppl_base": 10.0, "ppl_ratio": 1.0, "kld_mean": kld, "kld_p99": kld,
               "kld_max": kld, "top1": 1.0}
    missed = (f"kld mean {kld:.4g} > budget 0.0001",) if kld > 1e-4 else ()
    return verdict.numerics_part([verdict.NumericsComparison(device="CPU", figures=figures, missed=missed)],
                                 {"kld_mean": 1e-4, "kld_p99": 1e-3, "ppl_ratio": 0.002, "top1": 0.99})


def _parts(*, spv_ok: bool = True, same: bool = True, slow: bool = False, own: bool = True,
           kld: float = 0.0) -> list[verdict.Part]:
    ref = _set({"a.spv": "1" * 64, "b.spv": "2" * 64})
    cur = _set({"a.spv": "1" * 64, "b.spv": ("2" if spv_ok else "3") * 64})
    art = verdict.artifacts_part([compare_sets("llama", cur, ref)], [])
    old = answers.Answer(text=" Paris", tokens=(1,), pieces=(" Paris",))
    new = old if same else answers.Answer(text=" Lyon", tokens=(2,), pieces=(" Lyon",))
    ans = verdict.answers_part([answers.compare("CPU", "capital", new=new, working=old)])
    ratio = 0.5 if slow else 1.0
    decode = speed.speed_verdict(speed_measures([(30, 30 * ratio)] * 5), rounds_asked=5)
    sp = verdict.speed_part({("CPU", "decode"): decode,
                             ("CPU", "prompt"): speed.speed_verdict(speed_measures([(200, 200)] * 5), rounds_asked=5)})
    check = provenance.FileCheck(path="/b/bin/libggml.so", status=provenance.OWN if own else provenance.FOREIGN,
                                 detail="" if own else "system")
    prov = verdict.provenance_part([provenance.Provenance(side="new", device="CPU", pid=1,
                                                          executable="/b/bin/llama-server", checks=(check,))])
    return [prov, sp, ans, art, _numerics(kld=kld)]


def test_verified_only_when_all_parts_hold():
    v = verdict.verdict(_parts())
    assert v.verified and v.exit_code == 0 and v.label == "VERIFIED" and v.failed == ()
    assert [p.name for p in v.parts] == list(verdict.PARTS)


def test_numerics_over_budget_is_not_verified_though_every_answer_agrees():
    v = verdict.verdict(_parts(kld=0.02))
    assert not v.verified and v.exit_code == 11 and v.failed == ("numerics",)
    assert "CPU: kld mean 0.02 > budget 0.0001" in v.headline()
    assert verdict.verdict([p for p in _parts() if p.name != "numerics"]
                           + [verdict.numerics_not_checked("the recipe has no numerical check")]).verified


def test_not_verified_names_each_failed_part():
    v = verdict.verdict(_parts(spv_ok=False, same=False, slow=True, own=False))
    assert not v.verified and v.exit_code == 11
    assert v.failed == ("artifacts", "answers", "speed", "provenance")
    head = v.headline()
    assert head.startswith("NOT VERIFIED: artifacts: Vulkan SPIR-V: 1/2 byte-identical")
    assert "differs  b.spv" in "\n".join(v.parts[0].lines)
    assert "token 0 at the start: new ' Lyon' (id 2), working ' Paris' (id 1)" in head
    assert "CPU decode slower 0.500" in head
    with pytest.raises(ValueError):
        verdict.verdict(_parts()[:3])


def test_recipe_without_kernel_artifacts_compares_its_outputs():
    outs = compare_sets("llama", _set({"libggml-cpu.so": "1" * 64}), _set({"libggml-cpu.so": "2" * 64}))
    p = verdict.artifacts_part([], [outs])
    assert not p.ok and "output binaries are compared" in p.summary and "differs  libggml-cpu.so" in "\n".join(p.lines)


def _facts(tmp_path: Path) -> report.RunFacts:
    return report.RunFacts(recipe="default", new={"folder": "/n", "given_as": "build folder"},
                           working={"folder": "/w", "given_as": "run folder"}, rounds=5, tolerance=0.03,
                           devices=("CPU",), started_at="2026-01-01T00:00:00+00:00", seconds=12.3,
                           run_dir=str(tmp_path),
                           model={"path": "/m/Qwen3-0.6B-Q4_0.gguf", "sha256": "c" * 64, "source": "local"})


def test_report_files_are_written_whole(tmp_path):
    log = tmp_path / "logs" / "server-r1-new.log"
    log.parent.mkdir()
    log.write_text("started\n")
    v = verdict.verdict(_parts(slow=True))
    w = report.write_all(tmp_path, v, _facts(tmp_path),
                         bundle_files=[("logs/server-r1-new.log", log), ("missing.json", tmp_path / "nope")])
    doc = json.loads(w.json.read_text())
    assert doc["kind"] == report.KIND
    assert doc["schema"] == report.SCHEMA and doc["verdict"] == "NOT VERIFIED"
    assert doc["exit_code"] == 11 and doc["failed"] == ["speed"]
    speed_part = next(p for p in doc["parts"] if p["name"] == "speed")
    assert speed_part["per_device"][0]["verdict"] == "slower"
    md = w.md.read_text()
    assert md.startswith("## Verification run: NOT VERIFIED (speed)")
    assert "| CPU | decode | 30.0 | 15.0 | 0.500 | 0.500..0.500 (94%) | 5/5 | slower |" in md
    # the answers and speeds rest on this file: its hash is in the report and the bundle's JSON
    assert doc["model"]["sha256"] == "c" * 64 and f"Model `Qwen3-0.6B-Q4_0.gguf` sha256 `{'c' * 64}`" in md
    with tarfile.open(w.bundle) as tar:
        assert tar.getnames() == ["verification.md", "verification.json", "logs/server-r1-new.log"]
        assert json.loads(tar.extractfile("verification.json").read())["verdict"] == "NOT VERIFIED"
    names = ["logs", "verification.json", "verification.md", "verification.tar.gz"]
    assert sorted(p.name for p in tmp_path.iterdir()) == names


def _no_speed(parts: list[verdict.Part]) -> list[verdict.Part]:
    return [verdict.speed_not_measured() if p.name == "speed" else p for p in parts]


def test_speed_not_measured_is_not_judged_and_every_output_says_so(tmp_path):
    v = verdict.verdict(_no_speed(_parts(slow=True)))  # the slow figures are gone with their part
    assert v.verified and v.exit_code == 0 and v.label == "VERIFIED" and v.not_judged == ("speed",)
    assert v.title == "VERIFIED (speed not measured)"
    assert v.headline().startswith("VERIFIED (speed not measured): Vulkan SPIR-V: 2/2 byte-identical")
    assert "; speed: not measured (--no-speed); " in v.headline()
    speed_p = next(p for p in v.parts if p.name == "speed")
    assert speed_p.status == "skipped" and [p.status for p in v.parts if p.name != "speed"] == ["ok"] * 4
    facts = report.RunFacts(**{**_facts(tmp_path).__dict__, "speed_measured": False})
    w = report.write_all(tmp_path, v, facts)
    doc = json.loads(w.json.read_text())
    assert doc["verdict"] == "VERIFIED" and doc["speed_measured"] is False and doc["not_judged"] == ["speed"]
    assert doc["rounds"] is None and doc["tolerance"] is None
    assert next(p for p in doc["parts"] if p["name"] == "speed")["judged"] is False
    md = w.md.read_text()
    assert md.startswith("## Verification run: VERIFIED (speed not measured)")
    assert "speed not measured (--no-speed);" in md and "interleaved rounds" not in md
    assert "| speed | skipped | not measured (--no-speed) |" in md


def test_a_failed_part_beside_speed_not_measured():
    v = verdict.verdict(_no_speed(_parts(spv_ok=False)))
    assert not v.verified and v.exit_code == 11 and v.failed == ("artifacts",)
    assert v.title == "NOT VERIFIED (artifacts; speed not measured)"
    assert v.headline().startswith("NOT VERIFIED: artifacts: ")
    assert v.headline().endswith("; speed: not measured (--no-speed)")


def test_speed_not_measured_is_a_skipped_junit_case(tmp_path):
    from onebit_build.verify_run.verdict_junit import junit_cases

    cases = junit_cases(verdict.verdict(_no_speed(_parts())), recipe="default")
    path = write_junit(tmp_path / "j.xml", "verify-run", cases)
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None and suite.get("skipped") == "1" and suite.get("failures") == "0"
    skipped = [tc for tc in suite.iter("testcase") if tc.find("skipped") is not None]
    assert [tc.get("name") for tc in skipped] == ["speed"]
    assert skipped[0].find("skipped").get("message") == "not measured (--no-speed)"
    assert not [c for c in cases if c.name.startswith("speed:")]  # no metric was measured


# --------------------------------------------------------------------------- junit


def test_junit_xml_lists_each_check(tmp_path):
    cases = [Case(name="artifacts", ok=True, message="2/2"),
             Case(name="speed", ok=False, message="slower 0.5", detail="CPU decode")]
    path = write_junit(tmp_path / "j.xml", "verify-run", cases, seconds=1.5)
    root = ET.parse(path).getroot()
    suite = root.find("testsuite")
    assert suite is not None and suite.get("tests") == "2" and suite.get("failures") == "1"
    failed = [tc for tc in suite.iter("testcase") if tc.find("failure") is not None]
    assert [tc.get("name") for tc in failed] == ["speed"] and failed[0].find("failure").get("message") == "slower 0.5"
    assert junit_xml("x", []).startswith(b"<?xml")
