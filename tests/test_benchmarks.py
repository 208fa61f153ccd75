"""Every script in ``benchmarks/`` (and the kernel tools' Python scripts) run here on its cheapest
case, or as a dry run that builds its commands, and the commands checked against the tool's own:
its parser, its plan, its recipe. A script that drifts from the tool fails here instead of on the
next machine it is run on (first_run_pairs.py once configured without the CMakeInit.txt the
tool's configure loads with -C, and nothing noticed).

Nothing here compiles or starts a real llama-server: the subprocesses are the tool's plan and a
few starts of it, one CMake configure of an empty project (no compiler runs), and small Python
stand-ins for llama-server and llama-perplexity; about 30 s on 2 cores."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from onebit_build.commands.parser import make_parser
from onebit_build.spec.recipe import load_recipe
from onebit_build.spec.pins import load_pins

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks"
CUDA = BENCH / "cuda-h200"
KERNEL_TOOLS = REPO / "kernels" / "row-tiled-q4_0" / "tools"
LAUNCHERS = {"CMAKE_C_COMPILER_LAUNCHER", "CMAKE_CXX_COMPILER_LAUNCHER"}
SET_LINE = re.compile(r"^set\((\w+) \[(=*)\[(.*?)\]\2\] CACHE STRING \"\" FORCE\)$", re.M | re.S)


def env_for(tmp: Path) -> dict[str, str]:
    """Caches in ``tmp``; the tool of this interpreter first on PATH (a script may call ``onebit-build``)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp / "cache"), "PIP_CACHE_DIR": str(tmp / "pip-cache")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("ONEBIT_WORKSPACE", None)
    return env


def script(path: Path, *args: str, tmp: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(path), *args], cwd=REPO, env=env_for(tmp), capture_output=True,
                          text=True, timeout=timeout, check=False)


def dry_json(path: Path, *args: str, tmp: Path) -> dict:
    r = script(path, *args, "--dry-run", tmp=tmp)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def tool_ns(argv: list[str]):
    """``argv`` (``onebit-build ...`` or ``PYTHON -m onebit_build ...``) as the tool's own parser
    reads it; an option or command the tool does not take exits 2 here."""
    if argv[:1] == ["onebit-build"]:
        rest = argv[1:]
    else:
        assert argv[1:3] == ["-m", "onebit_build"], argv
        rest = argv[3:]
    return make_parser(rest).parse_args(rest)


def default_recipe():
    return load_recipe(REPO / "recipes" / "default.yaml", load_pins(REPO / "pins.yaml"))


def init_values(text: str) -> dict[str, str]:
    found = {m.group(1): m.group(3) for m in SET_LINE.finditer(text)}
    assert len(found) == text.count("set("), f"a line of CMakeInit.txt is not read here:\n{text}"
    return found


# ---------------------------------------------------------------- first_run_pairs.py


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("first-run")
    return tmp, dry_json(BENCH / "first_run_pairs.py", "--out", str(tmp / "out"), tmp=tmp)


def test_first_run_pairs_plain_side_is_the_tools_configure_with_its_init_cache(first_run):
    """The plain side configures exactly as the tool does: the same argv with -C and the same
    CMakeInit.txt (every define, the path maps moved to the plain folders), only the compiler
    launchers empty; compared with the tool's own plan, made here with its default compiler cache."""
    tmp, doc = first_run
    out = subprocess.run([sys.executable, "-m", "onebit_build", "--workspace", str(tmp / "ws2"), "plan", "--json"],
                         env=env_for(tmp), capture_output=True, text=True, check=True, timeout=120).stdout
    tool = json.loads(out)["components"][0]
    assert tool_ns(doc["tool"]).command is None  # the whole default job, as a first run runs it
    plain = doc["plain"]
    plain_src, plain_build = Path(plain["configure"][2]), Path(plain["configure"][4])
    assert plain["configure"][1::2][:2] == ["-S", "-B"] and plain_build == tmp / "out" / "plain-1" / "build"
    tool_tree = tool["configure"][tool["configure"].index("-S") + 1]

    def tool_side(s: str) -> str:
        return s.replace(tool["build_dir"], "<B>").replace(tool_tree, "<S>")

    def plain_side(s: str) -> str:
        return s.replace(str(plain_build), "<B>").replace(str(plain_src), "<S>")

    assert [plain_side(a) for a in plain["configure"]] == [tool_side(a) for a in tool["configure"]]
    assert [plain_side(a) for a in plain["build"]] == [tool_side(a) for a in tool["build"]]
    init = Path(plain["configure"][plain["configure"].index("-C") + 1])
    assert init == Path(plain["init_cache"]) == plain_build / "CMakeInit.txt" and init.is_file()
    mine = {k: plain_side(v) for k, v in init_values(init.read_text()).items()}
    theirs = {k: tool_side(v) for k, v in init_values(tool["init_cache"]).items()}
    assert set(mine) == set(theirs) and LAUNCHERS <= set(mine)
    assert {k: v for k, v in mine.items() if k not in LAUNCHERS} == {k: v for k, v in theirs.items()
                                                                     if k not in LAUNCHERS}
    assert all(mine[k] == "" for k in LAUNCHERS), "the plain side must build with no compiler cache"
    assert "-fdebug-prefix-map=<S>=." in mine["CMAKE_C_FLAGS"] and mine["GGML_CCACHE"] == "OFF"


def test_first_run_pairs_plain_configure_runs(first_run):
    """The plain configure runs for real (an empty project stands for llama.cpp, so no compiler
    starts): CMake loads the init file and the cache holds the tool's defines. Without the file
    this is the issue's ``CMake Error: Not a file: .../build/CMakeInit.txt``."""
    _, doc = first_run
    argv = doc["plain"]["configure"]
    src, build = Path(argv[2]), Path(argv[4])
    src.mkdir(parents=True, exist_ok=True)
    (src / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.16)\nproject(standin NONE)\n")
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    cache = (build / "CMakeCache.txt").read_text()
    assert "LLAMA_BUILD_SERVER:STRING=ON" in cache and "GGML_NATIVE:STRING=OFF" in cache
    assert f"-fdebug-prefix-map={src}=." in cache
    assert re.search(r"^CMAKE_C_COMPILER_LAUNCHER:STRING=$", cache, re.M)


# ---------------------------------------------------------------- the other scripts at the top


def test_startup_pairs_measures_a_command_from_two_trees(tmp_path):
    """Its cheapest real case: one command, one round, this tree as both sides; every start is timed."""
    out = tmp_path / "times.json"
    r = script(BENCH / "startup_pairs.py", "--old", str(REPO), "--new", str(REPO), "--rounds", "1",
               "--command=--version", "--json", str(out), tmp=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    times = json.loads(out.read_text())["times"]
    assert list(times) == ["--version"] and set(times["--version"]) == {"old", "new"}
    assert all(len(v) == 1 and 0 < v[0] < 60 for v in times["--version"].values())
    assert re.search(r"^--version\s+\d+\.\d+", r.stdout, re.M), r.stdout


def test_binary_cache_job_commands_are_the_tools(tmp_path):
    """publish to the registry, then ``all --binary-cache`` per run, as the tool's parser reads them;
    the model it copies is the default recipe's file."""
    ws = tmp_path / "ws"
    doc = dry_json(BENCH / "binary_cache_job.py", "--out", str(tmp_path / "out"), "--runs", "2",
                   "--from-workspace", str(ws), tmp=tmp_path)
    publish = tool_ns(doc["publish"])
    ref = publish.target
    assert publish.command == "publish" and publish.workspace == str(ws) and ref.startswith("oci://127.0.0.1:")
    assert len(doc["runs"]) == 2
    for argv in doc["runs"]:
        ns = tool_ns(argv)
        assert ns.command == "all" and ns.binary_cache == ref
    assert Path(doc["model"]) == ws / "models" / default_recipe().model.file
    assert doc["registry"][:2] == ["docker-registry", "serve"]


def test_numerics_budgets_plans_runs_the_recipe_can_score(tmp_path):
    """The runs it would start (the tool's Runner made for each): the CPU at 1 and 2 threads, twice
    each, with the recipe's workload, and a schedule that fits the recipe's context."""
    spec = default_recipe().numerics
    doc = dry_json(BENCH / "numerics_budgets.py", "--server", str(tmp_path / "llama-server"), "--model",
                   str(tmp_path / "m.gguf"), "--out", str(tmp_path / "out"), tmp=tmp_path)
    assert [(r["device"], r["threads"], r["tag"]) for r in doc["runs"]] == [
        ("CPU", 1, "t1-r1"), ("CPU", 1, "t1-r2"), ("CPU", 2, "t2-r1"), ("CPU", 2, "t2-r2")]
    assert all(r["ubatch"] == spec.ubatch and r["layers"] == "0" for r in doc["runs"])
    assert 0 < doc["tokens_needed"] <= doc["ctx_size"]
    text = (REPO / "smoke" / "eval" / spec.text).read_bytes()
    assert doc["text_sha256"] == hashlib.sha256(text).hexdigest()


# A stand-in for llama-server, enough for the scoring runs: /health, /tokenize (one token per byte)
# and /completion with a fixed distribution per prompt length, and the prompt cache's batch sizes.
STANDIN_SERVER = """\
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
argv = sys.argv[1:]
print("argv", json.dumps(argv), flush=True)
last = []

class Handler(BaseHTTPRequestHandler):
    def answer(self, doc):
        data = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.answer({"status": "ok"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            return self.answer({"tokens": [1, *body["content"].encode()]})
        prompt, target = body["prompt"], body["logit_bias"][0][0]
        same = next((i for i, (a, b) in enumerate(zip(prompt, last)) if a != b), min(len(prompt), len(last)))
        last[:] = prompt
        top = [{"id": (len(prompt) + j) % 256, "logprob": -0.5 - j} for j in range(body["n_probs"])]
        self.answer({"completion_probabilities": [{"id": target, "logprob": -1.0 - target % 7, "top_logprobs": top}],
                     "timings": {"prompt_n": max(1, len(prompt) - same)}})

    def log_message(self, *args):
        pass

ThreadingHTTPServer((argv[argv.index("--host") + 1], int(argv[argv.index("--port") + 1])), Handler).serve_forever()
"""


# A stand-in for llama-perplexity: writes the KL base file and prints the figures as it does.
STANDIN_PERPLEXITY = """\
import sys
argv = sys.argv[1:]
if "--kl-divergence" not in argv:
    open(argv[argv.index("--kl-divergence-base") + 1], "wb").write(b"base")
    sys.exit(0)
print("Mean PPL(Q)                   :  12.5 +/- 0.1\\nMean PPL(base)                :  12.25 +/- 0.1")
print("Mean PPL(Q)/PPL(base)         :   1.0204 +/- 0.001\\nMean    KLD:   0.0012 +/- 0.0001")
print("Maximum KLD:   0.25\\n99.0%   KLD:   0.01\\nSame top p: 97.5 +/- 0.5 %")
"""


def standin(path: Path, body: str) -> Path:
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


def started_with(out: Path) -> list[list[str]]:
    """The argv of every stand-in server started for a run writing into ``out``."""
    return [json.loads(line.split(" ", 1)[1]) for log in sorted(out.glob("numerics-*.log"))
            for line in log.read_text().splitlines() if line.startswith("argv ")]


def test_numerics_budgets_runs_its_cpu_runs_on_a_standin_server(tmp_path):
    """Its cheapest real case: the four CPU scoring runs through the tool's own runner, against a
    stand-in llama-server that answers the same to every run: each server started with the
    recipe's threads and micro-batch, every position scored, every run the same as the first."""
    server = standin(tmp_path / "llama-server", STANDIN_SERVER)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    out = tmp_path / "out"
    r = script(BENCH / "numerics_budgets.py", "--server", str(server), "--model", str(model), "--out", str(out),
               tmp=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((out / "budgets.json").read_text())
    spec = default_recipe().numerics
    assert [(row["tag"], row["threads"]) for row in doc["runs"]] == [("t1-r1", 1), ("t1-r2", 1), ("t2-r1", 2),
                                                                      ("t2-r2", 2)]
    for row in doc["runs"]:
        assert row["positions"] == spec.rounds * (spec.steps + 1) and row["batches"] == "as planned", row
        assert row["kld_max"] == 0 and row["ppl_ratio"] == 1 and row["top1"] == 1, row
    starts = started_with(out)
    assert sorted(a[a.index("-t") + 1] for a in starts) == ["1", "1", "2", "2"]
    assert all(a[a.index("-ub") + 1] == str(spec.ubatch) and a[a.index("-m") + 1] == str(model) for a in starts)


def test_numerics_crosscheck_runs_both_sides_on_standins(tmp_path):
    """Its cheapest real case, ctx 64: llama-perplexity's figures read from its output (a stand-in's,
    in its format), the tool's side scored through the tool's runner on the stand-in server, the
    second configuration's server started with the quantized K cache."""
    server = standin(tmp_path / "llama-server", STANDIN_SERVER)
    ppl = standin(tmp_path / "llama-perplexity", STANDIN_PERPLEXITY)
    out = tmp_path / "out"
    r = script(BENCH / "numerics_crosscheck.py", "--server", str(server), "--perplexity", str(ppl), "--model",
               str(tmp_path / "m.gguf"), "--out", str(out), "--ctx", "64", tmp=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((out / "crosscheck.json").read_text())
    assert doc["llama_perplexity"] == {"ppl_base": 12.25, "ppl": 12.5, "ppl_ratio": 1.0204, "kld_mean": 0.0012,
                                       "kld_p99": 0.01, "kld_max": 0.25, "top1": 0.975}
    ours = doc["onebit_build"]
    assert ours["positions"] == 31 and ours["kld_max"] == 0 and ours["batches"] == "as planned", ours
    starts = started_with(out)
    assert len(starts) == 2 and sum(a[-4:-2] == ["-ctk", "q8_0"] for a in starts) == 1, starts


@pytest.mark.parametrize("ctx", [256, 64])
def test_numerics_crosscheck_scores_the_positions_llama_perplexity_scores(tmp_path, ctx):
    """The script's claim: the tool's schedule (its own ``schedule``) reads the logits at ctx/2 ..
    ctx-2, the second half of llama-perplexity's one chunk of ``ctx`` tokens."""
    doc = dry_json(BENCH / "numerics_crosscheck.py", "--server", "srv", "--perplexity", "ppl", "--model", "m.gguf",
                   "--out", str(tmp_path / "out"), "--ctx", str(ctx), tmp=tmp_path)
    ours, theirs = doc["onebit_build"], doc["llama_perplexity"]
    assert ours["logit_positions"] == list(range(ctx // 2, ctx - 1))
    assert theirs["logit_positions"] == [ctx // 2, ctx - 2]
    assert ours["tokens_needed"] <= ctx
    base = theirs["base"]
    assert base[base.index("-c") + 1] == str(ctx) and base[base.index("--chunks") + 1] == "1"
    assert Path(base[base.index("-f") + 1]).read_text().strip()
    assert theirs["variant"][:len(base) - 2] == base[:-2] and "--kl-divergence" in theirs["variant"]


def step_pattern(name: str) -> re.Pattern[str]:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # a dataclass looks its module up there
    try:
        spec.loader.exec_module(module)  # their imports are the standard library's; main() is not run
    finally:
        del sys.modules[name]
    return module.STEP


@pytest.mark.parametrize("name", ["first_run_pairs", "binary_cache_job"])
def test_the_stage_lines_the_scripts_read_are_the_ones_the_tool_prints(tmp_path, name):
    """The scripts take each stage's time from the tool's output: every stage they read is printed
    by the package (``ui.stage(NAME)`` or the binary cache's own line), and a line the tool's
    ``ui.stage`` prints is one their pattern reads, name and seconds."""
    step = step_pattern(name)
    stages = re.match(r"\^\(([\w|]+)\)", step.pattern).group(1).split("|")
    source = "".join(p.read_text() for p in (REPO / "onebit_build").rglob("*.py"))
    for stage in stages:
        assert f'ui.stage("{stage}")' in source or f"{{'{stage}':<8}} ok (" in source, stage
    code = "from onebit_build.core import ui\nwith ui.stage('build') as st:\n    st['note'] = '12/40 hits'\n"
    r = subprocess.run([sys.executable, "-c", code], env=env_for(tmp_path), capture_output=True, text=True,
                       check=True, timeout=60)
    found = [(m.group(1), float(m.group(2))) for m in step.finditer(r.stdout + r.stderr)]
    assert len(found) == 1 and found[0][0] == "build" and 0 <= found[0][1] < 5, r.stdout + r.stderr


# ---------------------------------------------------------------- cuda-h200/


def committed_references() -> list[Path]:
    found = sorted((REPO / "references").glob("*/*.json"))
    assert found, "no committed reference"
    return found


@pytest.mark.parametrize("ref", committed_references(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_refname_names_each_committed_reference_as_it_is_committed(tmp_path, ref):
    r = script(CUDA / "refname.py", str(ref), ref.parent.name, tmp=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == ref.name, r.stderr
    other = "default" if ref.parent.name != "default" else "cuda"
    r = script(CUDA / "refname.py", str(ref), other, tmp=tmp_path)
    assert r.returncode == 1 and "is not a reference of recipe" in r.stderr


def test_checkdeps_finds_every_requirement_of_the_installed_tool(tmp_path):
    from importlib.metadata import version

    r = script(CUDA / "checkdeps.py", tmp=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"every requirement of onebit-build {version('onebit-build')} is met" in r.stdout


def tool_calls(sh: Path) -> list[list[str]]:
    """Every call of the tool in a shell script (``ob ...`` or ``... -m onebit_build ...``), its
    continuation lines joined, cut at the first redirection or list operator, arrays expanded."""
    text = sh.read_text().replace("\\\n", " ")
    arrays = {m.group(1): shlex.split(m.group(2)) for m in re.finditer(r"^(\w+)=\((.*)\)$", text, re.M)}
    calls = []
    for line in text.splitlines():
        m = re.search(r"(?:(?:^|\s)ob |-m onebit_build )(--.*)", line)
        if not m or line.lstrip().startswith(("#", "ob()")):
            continue
        args = re.split(r"\s(?:\|\||&&|>|2>)|[;)]", " " + m.group(1))[0]
        argv = []
        for word in shlex.split(args):
            array = re.fullmatch(r"\$\{(\w+)\[@\]\}", word)
            argv += arrays[array.group(1)] if array else [word]
        calls.append(argv)
    return calls


def test_cuda_h200_scripts_call_the_tool_as_it_parses():
    """remote.sh and pack.sh: every call of the tool is one its parser takes (commands, options,
    choices); the calls found are the ones the README's steps need."""
    calls = tool_calls(CUDA / "remote.sh") + tool_calls(CUDA / "pack.sh")
    commands = []
    for argv in calls:
        ns = tool_ns(["onebit-build", *argv])
        commands.append(ns.command or ("--version" if ns.version else None))
    assert sorted(set(commands)) == ["--version", "doctor", "fetch", "model", "patch", "smoke", "verify"], commands
    assert len(calls) >= 9


def shell_scripts() -> list[Path]:
    found = sorted([*BENCH.rglob("*.sh"), *KERNEL_TOOLS.glob("*.sh")])
    assert len(found) >= 8
    return found


@pytest.mark.parametrize("sh", shell_scripts(), ids=lambda p: p.name)
def test_shell_script_parses_and_every_file_it_names_exists(sh):
    """``bash -n``, and every ``$HERE/FILE`` (beside the script) and ``$REPO/PATH`` it names is in the
    tree (a file moved or removed, such as a kernel patch, fails here). .carry/ and .venv/ are made
    by the runs themselves."""
    r = subprocess.run(["bash", "-n", str(sh)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    text = sh.read_text()
    for name in set(re.findall(r"\$HERE/([\w.-]+)", text)) - {".."}:
        assert (sh.parent / name).exists(), f"{sh.name} names $HERE/{name}, which is not beside it"
    for rel in set(re.findall(r"\$REPO/([\w./-]+)", text)):
        if not rel.startswith("."):
            assert (REPO / rel).exists(), f"{sh.name} names $REPO/{rel}, which is not in the tree"


# ---------------------------------------------------------------- the kernel tools


@pytest.mark.parametrize("name", sorted(p.name for p in KERNEL_TOOLS.glob("*.py")))
def test_kernel_tool_starts(tmp_path, name):
    """Each compiles; one with a command line loads its imports and arguments (``--help``). The GPU
    work itself needs a CUDA machine; copy_bandwidth.py needs PyTorch and has no ``--help``."""
    source = (KERNEL_TOOLS / name).read_text()
    compile(source, name, "exec")
    if "ArgumentParser(" in source:
        r = script(KERNEL_TOOLS / name, "--help", tmp=tmp_path)
        assert r.returncode == 0 and r.stdout.startswith("usage:"), r.stderr


def test_make_random_llama_writes_a_model_gguf_reads(tmp_path):
    """Its cheapest real case: a one-layer model of 64-value rows, read back by gguf-py."""
    import gguf

    out = tmp_path / "m.gguf"
    r = script(KERNEL_TOOLS / "make_random_llama.py", "--layers", "1", "--embd", "64", "--ff", "128", "--heads",
               "2", "--kv-heads", "1", "--vocab", "64", "--ctx", "32", str(out), tmp=tmp_path)
    assert r.returncode == 0, r.stderr
    reader = gguf.GGUFReader(out)
    arch = reader.fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == "llama"
    types = {t.name: t.tensor_type for t in reader.tensors}
    assert types["blk.0.ffn_down.weight"] == gguf.GGMLQuantizationType.Q4_0
    assert "blk.1.attn_q.weight" not in types


def test_the_checkers_cases_reach_every_form_of_the_dispatch():
    """The checker's case list (what its known-bad proof runs) labels cases on every form the patch
    dispatches to, and its group r4 alone reaches all of them."""
    sys.path.insert(0, str(KERNEL_TOOLS))
    try:
        import check_mmvq_q4_0 as checker
    finally:
        sys.path.remove(str(KERNEL_TOOLS))
    forms = {"unpatched", "registers", "shared-mem", "tensor-core"}
    cases = checker.build_cases()
    for group in (None, "r4"):
        chosen = [c for c in cases if group is None or c.group == group]
        assert {checker.kernel_path(c.rows, c.blocks, c.ncols, 4096) for c in chosen} == forms, group


def test_every_benchmark_script_is_named_by_a_test():
    """A Python script added to benchmarks/ that no test names fails here (it would rot unseen);
    every shell script is parsed by test_shell_script_parses_and_every_file_it_names_exists."""
    tests = "".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    scripts = sorted(p for p in BENCH.rglob("*.py") if p.is_file())
    assert scripts
    unnamed = [str(p.relative_to(BENCH)) for p in scripts if p.name not in tests]
    assert unnamed == [], f"no test names {unnamed}"
