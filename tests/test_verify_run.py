"""verify-run end to end on real builds, real servers and the real model: a second build of
the same configuration passes; a binary-changing define, a flipped shader byte and a
deliberately slowed build fail, each naming what differs; bad input is one line with its
exit code, leaves no report and no server.

The builds are the test workspace's (built once, then reused): the default recipe's, a
second build of it in a workspace beside (through the compiler cache) and, where glslc
exists, the vulkan recipe's (the uncached 'verify --rebuild' is test_rebuild's).
The test machine is small and shared, so speed is judged with a ±10 % tolerance here; the
recipes' ±3 % is for a quiet verification box."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from _support import REPO, cache_programs, run_cli, shared_from_user, stream_cli
from conftest import progress, vulkan_workspace_for_tests, workspace_for_tests
from onebit_build.checking import manifest as manifest_mod
from onebit_build.core.fsutil import sha256_file
from onebit_build.running.bench import BenchLock

TOLERANCE = "0.10"
pytestmark = pytest.mark.shared_workspace


def cli(*args: str, timeout: float = 3600):
    return run_cli(REPO, "--workspace", str(workspace_for_tests()), *args, timeout=timeout)


def servers_running_from(folder: Path, logging_to: Path | None = None) -> list[int]:
    """Processes whose executable lies under ``folder`` and, with ``logging_to``, that hold a
    file open under that folder (a run's server writes its log into the run folder): the
    default build's servers of tests running beside this one on another worker are not
    this run's."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
            if not exe.startswith(str(folder)):
                continue
            if logging_to is not None:
                fds = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
                if not any(f.startswith(str(logging_to)) for f in fds):
                    continue
        except OSError:
            continue
        found.append(int(pid))
    return found


def verdict_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "verification.json").read_text())


def part(doc: dict, name: str) -> dict:
    return next(p for p in doc["parts"] if p["name"] == name)


def fake_build(folder: Path, recipe: str) -> Path:
    """A folder that looks like a build of ``recipe`` (enough to be resolved as one)."""
    (folder / "bin").mkdir(parents=True)
    server = folder / "bin" / "llama-server"
    server.write_bytes(b"#!/bin/sh\nexit 1\n")
    server.chmod(0o755)
    doc = {"kind": manifest_mod.KIND, "schema": manifest_mod.SCHEMA, "recipe": {"name": recipe},
           "components": [{"name": "llama", "build_dir": str(folder), "outputs": [
               {"name": "llama-server", "path": str(server), "sha256": sha256_file(server), "size": 17}]}]}
    (folder / "build-manifest.json").write_text(json.dumps(doc))
    return folder


# --------------------------------------------------------------------------- bad input (no build needed)


@pytest.mark.parametrize("make, message", [
    (lambda t: t / "nothing-here", "no such file or folder"),
    (lambda t: t, "not a build: the folder holds no build-manifest.json"),
    (lambda t: fake_build(t / "vk", "vulkan"), "a build of recipe 'vulkan', not 'default'"),
])
def test_bad_working_path_is_one_line_and_leaves_nothing(tmp_path, make, message):
    ws = tmp_path / "ws"
    out = run_cli(REPO, "--workspace", str(ws), "verify-run", "--working", str(make(tmp_path)))
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("error: --working"), out.stderr
    assert not (ws / "runs").exists()


def test_too_few_rounds_are_refused(tmp_path):
    b = fake_build(tmp_path / "b", "default")
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "verify-run", "--working", str(b), "--rounds", "3")
    assert out.returncode == 2 and "a speed verdict needs at least 5 rounds" in out.stderr


@pytest.mark.parametrize("extra, message", [
    (("--no-speed", "--rounds", "9"), "--no-speed runs no speed rounds, so --rounds would do nothing"),
    (("--no-speed", "--speed-budget", "60", "--tolerance", "0.1"),
     "--no-speed runs no speed rounds, so --speed-budget and --tolerance would do nothing"),
    (("--no-speed", "--decode-tokens", "32"), "so --decode-tokens would do nothing"),
    (("--decode-tokens", "8"), "--decode-tokens 8: a speed round needs 16 to 1024 tokens per request"),
    (("--decode-tokens", "5000"), "--decode-tokens 5000: a speed round needs 16 to 1024"),
    # the default recipe collects no kernel artifacts: with no speed to adopt, --adopt has nothing to do
    (("--no-speed", "--adopt"), "--adopt: recipe default collects no kernel artifacts and --no-speed adopts no speed"),
])
def test_speed_options_that_cannot_act_are_refused(tmp_path, extra, message):
    b = fake_build(tmp_path / "b", "default")
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "verify-run", "--working", str(b), *extra)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and message in lines[0], out.stderr
    assert not (tmp_path / "ws" / "runs").exists()


@pytest.mark.parametrize("budget", ["nan", "inf", "-1", "0", "soon"])
def test_a_speed_budget_that_is_no_number_of_seconds_is_refused_while_parsing(tmp_path, budget):
    b = fake_build(tmp_path / "b", "default")
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "verify-run", "--working", str(b),
                  "--speed-budget", budget)
    assert out.returncode == 2 and "argument --speed-budget:" in out.stderr and "seconds" in out.stderr, out.stderr
    assert not (tmp_path / "ws").exists()


def test_box_already_locked(tmp_path):
    b = fake_build(tmp_path / "b", "default")
    lock = tmp_path / "bench.lock"
    run_dir = tmp_path / "run"
    with BenchLock(lock, "a benchmark of the test"):
        out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "verify-run", "--working", str(b), "--lock", str(lock),
                      "--run-dir", str(run_dir))
    assert out.returncode == 15, out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert "bench lock" in line and "is held by" in line and "a benchmark of the test" in line and "--wait" in line
    assert not run_dir.exists()  # the folder made for this run is removed again: nothing half-written


# --------------------------------------------------------------------------- real builds


pytestslow = pytest.mark.slow


def streamed(pytestconfig, *args: str) -> None:
    """Run the CLI on the test workspace, its progress and time on the terminal."""
    rc, out = stream_cli(REPO, "--workspace", str(workspace_for_tests()), *args, say=progress(pytestconfig))
    assert rc == 0, out[-3000:]


@pytest.fixture(scope="module")
def default_build(pytestconfig) -> Path:
    """The default recipe's build as verify-run (run the same way) sees it: built here with
    the same arguments, so that it is the same configuration."""
    streamed(pytestconfig, "build")
    man = manifest_mod.load_latest(manifest_mod.Workspace(root=workspace_for_tests()), "default")
    assert man is not None
    return Path(man.output("llama-server").path).parent.parent


@pytest.fixture(scope="module")
def second_build(default_build, pytestconfig) -> Path:
    """The same configuration built a second time, in a workspace at another path (so its
    sources and build folder lie elsewhere), through the compiler cache the first build
    filled: a real second build, kept between runs like the first. The uncached rebuild is
    test_uncached_rebuild_of_the_kernels_is_byte_identical's."""
    ws = second_workspace()
    args = ("--workspace", str(ws), "--mirror-dir", str(workspace_for_tests() / "git"), "build")
    rc, out = stream_cli(REPO, *args, say=progress(pytestconfig))
    assert rc == 0, out[-3000:]
    man = manifest_mod.load_latest(manifest_mod.Workspace(root=ws), "default")
    assert man is not None
    folder = Path(man.output("llama-server").path).parent.parent
    assert folder != default_build and not folder.is_relative_to(workspace_for_tests())
    return folder


def second_workspace() -> Path:
    first = workspace_for_tests()
    return first.with_name(first.name + "-second")


@pytestslow
def test_second_build_of_the_same_configuration_is_verified(second_build, default_build, tmp_path):
    assert "ccache" not in cache_programs(default_build)  # the tool's launcher alone, never ccache under it
    run_dir, junit = tmp_path / "run", tmp_path / "junit.xml"
    # 9 rounds: the interval then leaves out the fastest and the slowest round
    # (with 5 it is their whole range). 16 decode tokens a request (the fewest verify-run
    # allows): the same bytes still scatter well within ±10 % (measured with a busy loop
    # beside it: decode 0.986..1.030 in 9 rounds; 32 tokens took a fifth longer a round).
    out = cli("verify-run", "--working", str(second_build), "--tolerance", TOLERANCE, "--rounds", "9",
              "--decode-tokens", "16", "--speed-budget", "600", "--run-dir", str(run_dir), "--junit", str(junit))
    doc = verdict_of(run_dir)
    assert doc["schema"] == 1 and doc["builds"]["working"]["folder"] == str(second_build)
    n = len(manifest_mod.load_manifest(default_build / "build-manifest.json").components[0].outputs)
    assert part(doc, "artifacts")["summary"].startswith(f"output binaries (new vs working): {n}/{n} byte-identical")
    assert part(doc, "answers")["ok"]
    rounds = part(doc, "speed")["per_device"][0]["rounds_run"]  # 9, and any added until decided
    assert rounds >= 9 and part(doc, "provenance")["ok"] and len(part(doc, "provenance")["servers"]) == 2 + 2 * rounds
    speed = [d["verdict"] for d in part(doc, "speed")["per_device"]]
    # The same bytes are never "slower". On a shared 2-core virtual machine single rounds can
    # lose a third of their speed (seen: decode 27 to 44 tok/s within one run), and then the
    # honest answer is "too noisy": NOT VERIFIED for speed alone, with the remedy printed.
    assert set(speed) <= {"on par", "faster", "too noisy"}, out.stderr[-4000:]
    if "too noisy" in speed:
        assert (out.returncode == 11 and doc["verdict"] == "NOT VERIFIED"
                and doc["failed"] == ["speed"]), out.stderr[-4000:]
        assert "the budget is spent: raise --speed-budget" in out.stderr and "too noisy" in junit.read_text()
    else:
        assert out.returncode == 0, out.stderr[-4000:]
        assert "\nVERIFIED\n" in out.stderr and doc["verdict"] == "VERIFIED" and 'failures="0"' in junit.read_text()
    with tarfile.open(run_dir / "verification.tar.gz") as tar:
        names = tar.getnames()
    assert {"verification.md", "verification.json", "manifests/new.json", "manifests/working.json"} <= set(names)
    assert any(n.startswith("logs/server-r9-") for n in names)
    # each timed request generated the 16 tokens asked for (the warm-up's 8 are the other line)
    log = (run_dir / "logs" / "server-r1-new_CPU.log").read_text()
    decoded = re.findall(r"\|\s+eval time = .*?/ +(\d+) tokens", log)
    assert decoded and set(decoded) == {"8", "16"}, decoded
    assert "decode tokens `16`" in (run_dir / "verification.md").read_text()
    assert f"report:  {run_dir / 'verification.md'}" in out.stderr
    assert not servers_running_from(default_build, logging_to=run_dir) and not servers_running_from(second_build)


@pytestslow
def test_define_that_changes_the_binary_is_not_verified(default_build, tmp_path):
    """What is asserted here is artifacts, answers and provenance, so the run measures no
    speed (--no-speed), and this test also shows what such a run says."""
    run_dir, junit = tmp_path / "run", tmp_path / "junit.xml"
    try:
        out = cli("-D", "LLAMA_BUILD_NUMBER=99999", "verify-run", "--working", str(default_build), "--no-speed",
                  "--run-dir", str(run_dir), "--junit", str(junit))
    finally:
        restored = cli("build")  # the workspace's latest default build is the plain one again
        assert restored.returncode == 0, restored.stderr[-2000:]
    assert out.returncode == 11, out.stderr[-4000:]
    doc = verdict_of(run_dir)
    assert doc["failed"] == ["artifacts"]
    art = part(doc, "artifacts")
    differing = [d[0] for c in art["counted"] for d in c["differing"]]
    assert differing, art
    for name in differing:
        assert f"differs  {name}" in out.stderr
    assert part(doc, "answers")["ok"] and part(doc, "provenance")["ok"]
    # --no-speed: the answers' servers only (one per build), and every output says speed was not judged
    assert len(part(doc, "provenance")["servers"]) == 2 and not list((run_dir / "logs").glob("server-r*"))
    assert doc["speed_measured"] is False and doc["not_judged"] == ["speed"] and part(doc, "speed")["judged"] is False
    assert "\nNOT VERIFIED (artifacts; speed not measured)\n" in out.stderr
    assert re.search(r"\n  speed +skipped +not measured \(--no-speed\)\n", out.stderr), out.stderr[-3000:]
    assert "speed not measured (--no-speed)" in (run_dir / "verification.md").read_text()
    assert 'skipped="1"' in junit.read_text() and '<skipped message="not measured (--no-speed)"' in junit.read_text()


@pytestslow
def test_slowed_build_is_slower_with_its_ratio(default_build, tmp_path):
    working = tmp_path / "working"
    shutil.copytree(default_build, working, symlinks=True)
    run_dir = tmp_path / "run"
    # The new build's servers run 8 threads pinned to one core: the same binary, much slower
    # (decode about half the speed, every token), so 16 decode tokens a request show it as
    # clearly as 64 and take a quarter of the decoding time.
    out = cli("verify-run", "--working", str(working), "--tolerance", TOLERANCE, "--run-dir", str(run_dir),
              "--decode-tokens", "16", "--new-args", "-t 8 --cpu-mask 0x1 --cpu-strict 1")
    assert out.returncode == 11, out.stderr[-4000:]
    doc = verdict_of(run_dir)
    assert doc["failed"] == ["speed"], doc["headline"]
    decode = next(d for d in part(doc, "speed")["per_device"] if d["metric"] == "decode")
    assert decode["verdict"] == "slower" and decode["median_ratio"] < 0.9 and decode["interval"][1] < 1.0
    assert re.search(r"CPU decode slower 0\.\d{3}", out.stderr)
    assert "-t 8 --cpu-mask 0x1 --cpu-strict 1" in (run_dir / "verification.md").read_text()
    assert not servers_running_from(working)


@pytest.fixture
def cpu_burner():
    """Load of our own on top of whatever else runs: one busy-loop process per core, each
    ending by itself after 30 minutes and killed (by pid) when the test ends."""
    stop_after = 1800
    code = f"import time\nend = time.monotonic() + {stop_after}\nwhile time.monotonic() < end:\n    pass\n"
    burners = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(os.cpu_count() or 1)]
    try:
        yield len(burners)
    finally:
        for b in burners:
            b.kill()
        for b in burners:
            b.wait(timeout=30)


@pytest.mark.benchmark
@pytestslow
def test_under_load_a_copy_is_verified_and_a_slowed_build_is_slower(default_build, cpu_burner, tmp_path):
    """Under a load we make (busy loops on top of the shared machine's own), a byte-identical
    copy is VERIFIED within the recipe's budget (900 s); the same copy served with 2 threads
    (-t 2: threads that meet at every barrier, while each core also runs a busy loop) is found
    slower. Two threads held on one core (--cpu-mask 0x1 --cpu-strict 1) are no bounded
    slowdown under this load: 0.19 tok/s, a round of 17 minutes. A benchmark (about 20
    minutes, a load of its own): run it with ``pytest -m benchmark``. Figures of the last run
    are in docs/reliability.md."""
    working = tmp_path / "working"
    shutil.copytree(default_build, working, symlinks=True)
    same = cli("verify-run", "--working", str(working), "--tolerance", TOLERANCE, "--run-dir", str(tmp_path / "same"))
    doc = verdict_of(tmp_path / "same")
    speed = part(doc, "speed")["per_device"]
    assert same.returncode == 0 and doc["verdict"] == "VERIFIED", same.stderr[-4000:]
    for d in speed:
        assert d["verdict"] in ("on par", "faster") and 5 <= d["rounds_run"] and d["seconds"] <= 900 + 120, d
        assert d["load_average"] is not None and d["load_average"] >= cpu_burner / 2, d
    summary = r"speed +ok +CPU decode (on par|faster) \d\.\d{3} after \d+ rounds"
    assert re.search(summary, same.stderr), same.stderr[-3000:]
    report = (tmp_path / "same" / "verification.md").read_text()
    took = r"CPU decode: (on par|faster): .*; \d+ rounds in \d+ s of a 900 s budget; load average \d+\.\d"
    assert re.search(took, report), report
    slowed = cli("verify-run", "--working", str(working), "--tolerance", TOLERANCE, "--speed-budget", "300",
                 "--run-dir", str(tmp_path / "slowed"), "--new-args", "-t 2")
    doc = verdict_of(tmp_path / "slowed")
    assert slowed.returncode == 11 and doc["failed"] == ["speed"], slowed.stderr[-4000:]
    decode = next(d for d in part(doc, "speed")["per_device"] if d["metric"] == "decode")
    assert decode["verdict"] == "slower" and decode["interval"][1] < 1.0, decode
    assert not servers_running_from(working)


@pytestslow
def test_working_build_whose_server_does_not_start(default_build, tmp_path):
    working = tmp_path / "broken"
    shutil.copytree(default_build, working, symlinks=True)
    lib = next((working / "bin").glob("libllama.so.*.*"))
    lib.write_bytes(lib.read_bytes()[:4096])  # a truncated library: the loader refuses it
    run_dir = tmp_path / "run"
    out = cli("verify-run", "--working", str(working), "--run-dir", str(run_dir))
    assert out.returncode == 10, out.stderr[-3000:]
    assert "error: the working build's llama-server did not start on CPU" in out.stderr
    assert not (run_dir / "verification.md").exists() and not (run_dir / "verification.json").exists()
    assert not list(run_dir.glob(".*.tmp"))
    assert not servers_running_from(working)


# --------------------------------------------------------------------------- vulkan


def vulkan_cli(*args: str, timeout: float = 3600):
    return run_cli(REPO, "--workspace", str(vulkan_workspace_for_tests()), "--recipe", "vulkan", *args,
                   timeout=timeout)


@pytest.fixture(scope="module")
def vulkan_build(pytestconfig) -> Path:
    """The vulkan recipe's build in its own test workspace (test_e2e_vulkan's)."""
    if shutil.which("glslc") is None:
        pytest.skip("glslc is not installed (apt-get install glslc libvulkan-dev spirv-headers)")
    ws = vulkan_workspace_for_tests()
    rc, out = stream_cli(REPO, "--workspace", str(ws), *shared_from_user(ws), "--recipe", "vulkan", "build",
                         say=progress(pytestconfig))
    assert rc == 0, out[-3000:]
    man = manifest_mod.load_latest(manifest_mod.Workspace(root=ws), "vulkan")
    assert man is not None
    return Path(man.output("llama-server").path).parent.parent


@pytestslow
@pytest.mark.shared_workspace(workspace="vulkan")
def test_flipped_shader_byte_in_the_working_build_is_named(vulkan_build, tmp_path):
    working = tmp_path / "working"
    shutil.copytree(vulkan_build, working, symlinks=True)  # never damage the shared build
    spv = working / "ggml" / "src" / "ggml-vulkan" / "vulkan-shaders.spv"
    victim = sorted(spv.glob("*.spv"))[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x40
    victim.write_bytes(bytes(data))
    total = len(list(spv.glob("*.spv")))
    run_dir = tmp_path / "run"
    # artifacts, answers and provenance are asserted, never speed: --no-speed
    out = vulkan_cli("verify-run", "--working", str(working), "--no-speed", "--run-dir", str(run_dir), "--adopt")
    assert out.returncode == 11, out.stderr[-4000:]
    doc = verdict_of(run_dir)
    assert "artifacts" in doc["failed"]
    assert f"Vulkan SPIR-V (new vs working): {total - 1}/{total} byte-identical" in out.stderr
    assert f"differs  {victim.name}" in out.stderr
    assert "not adopted: the artifacts of the two builds differ" in out.stderr
    assert "smoke speed not adopted: --no-speed measures no speed" in out.stderr
    assert part(doc, "answers")["ok"] and part(doc, "provenance")["ok"]
    assert not servers_running_from(working) and not servers_running_from(vulkan_build)


@pytestslow
@pytest.mark.shared_workspace(workspace="vulkan")
def test_adopted_reference_is_named_after_the_toolchain_and_verifies(vulkan_build, tmp_path):
    """--adopt's writer on the real vulkan build: the reference it writes is found as the
    match for this toolchain and holds every shader."""
    from onebit_build.checking.manifest import load_manifest
    from onebit_build.checking.references import (find_matching_reference, find_reference, fingerprint,
                                                  load_reference, reference_name)
    from onebit_build.checking.compare import compare_sets
    from onebit_build.spec.recipe import load_recipe
    from onebit_build.spec.pins import load_pins
    from onebit_build.verify_run import run as vrun
    from onebit_build.verify_run import request as vreq
    from onebit_build.verify_run.working import resolve_working

    recipe = load_recipe(REPO / "recipes" / "vulkan.yaml", load_pins(REPO / "pins.yaml"))
    build = resolve_working(vulkan_build, recipe="vulkan")
    sets = vrun.collect_sets(build)
    side = vreq.Side(role=vreq.WORKING, build=build)
    req = vreq.RunRequest(recipe=recipe, new=side, working=side, model=None, run_dir=tmp_path, prompts=(), rounds=5,
                          tolerance=0.03, refs_dir=tmp_path / "references" / "vulkan")
    path, said = vrun.adopt_reference(req, sets)
    glslc = next(iter(sets.values())).facts["glslc"]
    man = load_manifest(vulkan_build / "build-manifest.json")
    assert path == tmp_path / "references" / "vulkan" / f"{reference_name(fingerprint(man))}.json"
    assert path.name.endswith(f"_glslc-{glslc.replace(' ', '-')}.json")
    assert said == f"wrote {path}"
    found, _ = find_matching_reference(path.parent, sets)
    assert found == path and find_reference(path.parent, man)[0] == path
    ref = load_reference(path)
    assert all(compare_sets(k[0], s, ref.sets[k]).ok for k, s in sets.items())
    again, said = vrun.adopt_reference(req, sets)
    assert again == path and said.startswith("already recorded")


def test_run_dir_must_be_new(tmp_path):
    b = fake_build(tmp_path / "b", "default")
    old = tmp_path / "old-run"
    old.mkdir()
    (old / "verification.md").write_text("an older run's report\n")
    out = run_cli(REPO, "--workspace", str(tmp_path / "ws"), "verify-run", "--working", str(b), "--run-dir", str(old))
    assert out.returncode == 2 and "already exists and is not an empty folder" in out.stderr
    assert (old / "verification.md").read_text() == "an older run's report\n"
