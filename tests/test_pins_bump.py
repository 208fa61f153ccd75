"""``pins bump`` through the real CLI: on a tiny CMake project made here (real git, real CMake,
the real rebuild without the compiler cache) a move is refused at the gate that fails, with
pins.yaml and pins.lock byte-identical afterwards; on the real project, a move towards the
older llama-cpp-python 0.3.35 sdist is refused at the patches gate, naming the patch and hunk."""

from __future__ import annotations

import hashlib
import json
import shutil
import textwrap
from pathlib import Path

import pytest

from _support import REPO, bare_mirror, git, make_patch, make_repo, project_tree, run_cli, sources_from_workspaces

CMAKE = textwrap.dedent("""\
    cmake_minimum_required(VERSION 3.20)
    project(tiny C)
    set(GREETING "hello" CACHE STRING "what hello prints")
    add_executable(hello hello.c)
    target_compile_definitions(hello PRIVATE GREETING="${GREETING}")
    """)
HELLO = textwrap.dedent("""\
    #include <stdio.h>

    static const char *word(void) {
        return GREETING;
    }

    int main(void) {
        puts(word());
        return 0;
    }
    """)
RECIPE = """\
    schema: 1
    name: tiny
    description: two tiny C programs
    backends: [cpu]
    components:
      - name: hello
        source: tiny
        targets: [hello]
        outputs:
          llama-server: hello  # the output a bump smoke-tests (this one cannot serve a model)
      - name: other
        source: other
        targets: [hello]
        outputs:
          hello-other: hello
    """


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Two sources, a patch on the first, and upstream commits that each break one gate."""
    tmp = tmp_path_factory.mktemp("bump")
    src, other = tmp / "tiny", tmp / "other"
    old = make_repo(src, {"CMakeLists.txt": CMAKE, "hello.c": HELLO})
    other_old = make_repo(other, {"CMakeLists.txt": CMAKE, "hello.c": HELLO})
    other_new = make_repo(other, {"hello.c": HELLO.replace("return 0;", "return 0; /* other upstream */")}, "other up")
    git(src, "checkout", "-q", "-b", "series")
    make_patch(src, old, {"hello.c": HELLO.replace("return GREETING;", 'return GREETING "!";')}, "exclaim",
               tmp / "proj-patches" / "tiny", 1)
    new = {}
    for name, text, cmake in (
            ("ok", HELLO.replace("return 0;", "return 0; /* upstream */"), CMAKE),
            ("conflict", HELLO.replace("return GREETING;", 'return "up " GREETING;'), CMAKE),
            ("broken", HELLO.replace("#include <stdio.h>\n", "#include <stdio.h>\n#error upstream broke it\n"), CMAKE),
            ("random", HELLO.replace("return 0;", "puts(NONCE);\n    return 0;"),
             CMAKE + 'string(RANDOM LENGTH 16 NONCE)\ntarget_compile_definitions(hello PRIVATE NONCE="${NONCE}")\n')):
        git(src, "checkout", "-q", "--detach", old)
        new[name] = make_repo(src, {"hello.c": text, "CMakeLists.txt": cmake}, f"upstream {name}")
    mirrors = tmp / "mirrors"
    bare_mirror(src, mirrors, "tiny")
    bare_mirror(other, mirrors, "other")
    return {"tmp": tmp, "old": old, "other_old": other_old, "other_new": other_new, "new": new, "mirrors": mirrors}


def project(tiny, name: str) -> Path:
    pins = f"""\
        # the pinned sources
        schema: 1
        sources:
          tiny:
            url: https://example.invalid/tiny.git
            commit: {tiny['old']}  # kept comment
          other:
            url: https://example.invalid/other.git
            commit: {tiny['other_old']}
        """
    root = project_tree(tiny["tmp"] / name, pins=pins, recipes={"tiny": RECIPE})
    shutil.copytree(tiny["tmp"] / "proj-patches", root / "patches")
    return root


def bump(tiny, root: Path, *args: str):
    out = run_cli(root, "--workspace", str(root.parent / f"ws-{root.name}"), "--mirror-dir", str(tiny["mirrors"]),
                  "--recipe", "tiny", "pins", "bump", "tiny", "--json", *args, timeout=600)
    before = {"pins.yaml": sha(root / "pins.yaml")}
    doc = json.loads(out.stdout) if out.stdout.strip().startswith("{") else None
    return out, doc, before


def refused(out, doc, root: Path, gate: str, code: int) -> None:
    assert out.returncode == code, out.stderr[-3000:]
    assert doc is not None and doc["result"] == "refused" and doc["failed_gate"] == gate, out.stdout[-2000:]
    assert doc["pins_byte_identical"] is True and doc["written"] == []
    assert f"pins bump refused at gate {gate}" in out.stderr and "are byte-identical" in out.stderr
    run = next((root.parent / f"ws-{root.name}" / "runs").iterdir())
    assert json.loads((run / "bump-report.json").read_text())["failed_gate"] == gate
    assert f"REFUSED at gate {gate}" in (run / "bump-report.md").read_text()


def test_a_conflicting_patch_refuses_the_move_naming_it(tiny):
    root = project(tiny, "conflict")
    text = (root / "pins.yaml").read_bytes()
    out, doc, _ = bump(tiny, root, "--to", tiny["new"]["conflict"])
    refused(out, doc, root, "patches", 6)
    assert (root / "pins.yaml").read_bytes() == text and not (root / "pins.lock").exists()
    (p,) = doc["patches"]
    assert p["status"] == "conflicts" and p["patch"] == "0001-exclaim.patch"
    assert p["detail"][0] == "hello.c hunk 1/1 (@@ -1,7 +1,7 @@)"
    assert "0001-exclaim.patch (hello.c hunk 1/1" in out.stderr
    assert [g["status"] for g in doc["gates"]] == ["passed", "failed"] + ["not run"] * 5


def test_a_build_that_fails_refuses_the_move(tiny):
    root = project(tiny, "broken")
    out, doc, before = bump(tiny, root, "--to", tiny["new"]["broken"])
    refused(out, doc, root, "build", 9)
    assert sha(root / "pins.yaml") == before["pins.yaml"]
    assert [p["status"] for p in doc["patches"]] == ["applied three-way"]
    assert "upstream broke it" in out.stderr


def test_a_build_that_is_not_reproducible_refuses_the_move(tiny):
    root = project(tiny, "random")
    out, doc, before = bump(tiny, root, "--to", tiny["new"]["random"])
    refused(out, doc, root, "verify", 11)
    assert sha(root / "pins.yaml") == before["pins.yaml"]
    assert doc["gates"][2]["status"] == "passed" and "differs" in doc["gates"][3]["note"]


def test_a_coupled_pair_passes_build_and_verify_and_is_refused_at_smoke(tiny):
    """Both sources move together; the tiny recipe has no model to smoke-test, so the move
    stops there and nothing is written, though the build was reproducible."""
    root = project(tiny, "pair")
    (root / "pins.lock").write_text("# Written by 'onebit-build pins lock'\nschema: 1\nresolved: {}\n")
    lock = (root / "pins.lock").read_bytes()
    out, doc, before = bump(tiny, root, "--to", tiny["new"]["ok"], "--with", f"other={tiny['other_new']}")
    refused(out, doc, root, "smoke", 12)
    assert sha(root / "pins.yaml") == before["pins.yaml"] and (root / "pins.lock").read_bytes() == lock
    assert [m["source"] for m in doc["moves"]] == ["tiny", "other"]
    assert doc["moves"][1]["to"] == tiny["other_new"]
    assert [g["status"] for g in doc["gates"][:5]] == ["passed"] * 4 + ["failed"]
    assert "reproducible without the compiler cache" in doc["gates"][3]["note"]
    run = next((root.parent / "ws-pair" / "runs").iterdir())
    staged = (run / "project" / "pins.yaml").read_text()
    assert f"commit: {tiny['new']['ok']}\n" in staged and f"commit: {tiny['other_new']}\n" in staged
    assert "# kept comment" not in staged and "# the pinned sources" in staged


def test_a_pin_already_there_has_nothing_to_move(tiny):
    root = project(tiny, "same")
    out = run_cli(root, "--workspace", str(root.parent / "ws-same"), "--mirror-dir", str(tiny["mirrors"]),
                  "--recipe", "tiny", "pins", "bump", "tiny", "--to", tiny["old"])
    assert out.returncode == 0 and "nothing to move: tiny is at" in out.stdout, out.stderr


@pytest.mark.slow
def test_towards_an_older_sdist_a_conflicting_patch_is_named_and_pins_stay(tmp_path):
    """The real project, its llama.cpp pin (llama-cpp-python 0.3.36) towards 0.3.35's commit
    (from PyPI): patch 0003 conflicts in tests/CMakeLists.txt; refused, pins.yaml byte-identical."""
    root = tmp_path / "project"
    root.mkdir()
    for item in ("pins.yaml", "pins.lock", "recipes", "patches", "references", "smoke"):
        (shutil.copytree if (REPO / item).is_dir() else shutil.copy2)(REPO / item, root / item)
    text, lock = (root / "pins.yaml").read_bytes(), (root / "pins.lock").read_bytes()
    ws = tmp_path / "ws"
    out = run_cli(root, "--workspace", str(ws), *sources_from_workspaces(ws), "pins", "bump", "llama.cpp",
                  "--to-sdist", "llama-cpp-python==0.3.35", "--json", timeout=900)
    assert out.returncode == 6, out.stderr[-3000:]
    assert (root / "pins.yaml").read_bytes() == text and (root / "pins.lock").read_bytes() == lock
    doc = json.loads(out.stdout)
    assert doc["failed_gate"] == "patches" and doc["pins_byte_identical"] is True
    assert doc["moves"][0]["to"] == "4df29be4f4c3673f428170fda944a5b19f743bb8"
    assert doc["moves"][0]["sdist_to"] == "llama-cpp-python==0.3.35"
    status = {p["patch"]: p["status"] for p in doc["patches"]}
    assert status == {"0001-vulkan-older-headers-compat.patch": "applies with offset",
                      "0002-mmvq-row-tiled-q4_0.patch": "applied three-way",
                      "0003-ggml-backend-defines-private.patch": "conflicts"}
    conflict = doc["patches"][2]["detail"]
    assert conflict[0] == "tests/CMakeLists.txt hunk 1/2 (@@ -193,6 +193,7 @@ if (NOT WIN32 OR NOT BUILD_SHARED_LIBS))"
    assert "0003-ggml-backend-defines-private.patch (tests/CMakeLists.txt hunk 1/2" in out.stderr


def test_the_bench_gate_runs_old_against_new_on_real_servers(llama_server, gemma_model, tmp_path):
    """The gate's bench on the real llama-server (the same build on both sides here): both
    variants measured, every answer held, the table and bench.md written."""
    from onebit_build.commands.parser import make_parser
    from onebit_build.core.project import find_root
    from onebit_build.workflows.bump_bench import bench_old_new
    from onebit_build.job.job import Needs, open_job
    from onebit_build.commands._options import from_args

    argv = ["--workspace", str(tmp_path / "ws"), "--model", str(gemma_model), "pins", "bump", "llama.cpp",
            "--to", "a" * 40]
    opts = from_args(make_parser(argv).parse_args(argv))
    with open_job(opts.settings, find_root(given=str(REPO), env={}, cwd=REPO), Needs(), label=opts.label) as job:
        table, bad = bench_old_new(job, old=Path(llama_server), new=Path(llama_server), rounds=1,
                                   out=tmp_path / "bench", tie_margin=0.25)
    assert bad == [], bad
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert sorted((r.split(" | ")[0].strip("| "), r.split(" | ")[1]) for r in rows) == sorted(
        (p, v) for p in ("code", "prose", "short") for v in ("old", "new"))
    assert "baseline" in table and (tmp_path / "bench" / "bench.md").is_file()


def test_a_ctrl_c_during_a_gate_is_reported_as_interrupted_at_that_gate(tmp_path):
    """Ctrl-C arrives as KeyboardInterrupt in the gate that runs: the report is headed
    INTERRUPTED at that gate, lists it as interrupted (not "not run"), and the later ones as
    not run."""
    from onebit_build.workflows.bump_report import BumpRecord, gate, report_doc, write_report

    record = BumpRecord(recipe="tiny")
    with gate(record, "fetch"):
        pass
    with pytest.raises(KeyboardInterrupt):
        with gate(record, "build"):
            raise KeyboardInterrupt
    js, md = write_report(tmp_path, record)
    text = md.read_text()
    assert text.startswith("# Pin bump (tiny): INTERRUPTED at gate build\n"), text
    assert "| build | interrupted |" in text and "| fetch | passed |" in text and "| verify | not run |" in text
    doc = json.loads(js.read_text())
    assert report_doc(record)["result"] == "interrupted" and doc["failed_gate"] == "build", doc
    assert "gate None" not in text
