"""Test support: real local git repositories, tiny real CMake projects, and the real
default build/model shared by the slow tests."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.invalid",
    "GIT_COMMITTER_NAME": "Test Author",
    "GIT_COMMITTER_EMAIL": "author@example.invalid",
    "GIT_AUTHOR_DATE": "2024-01-02T03:04:05+0000",
    "GIT_COMMITTER_DATE": "2024-01-02T03:04:05+0000",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def sigint_default() -> None:
    """For Popen(preexec_fn=...) in the Ctrl-C tests: a child of a shell that started the tests
    in the background inherits SIGINT ignored, and Python then never raises KeyboardInterrupt;
    these tests need what a terminal gives."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cuda_wheel_bin() -> Path | None:
    """The bin folder of the nvidia-cuda-cuobjdump / -nvdisasm wheels of the test extra."""
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for d in sorted(Path(root).glob("cu*/bin")):
            if (d / "cuobjdump").exists() and (d / "nvdisasm").exists():
                return d
    return None


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The one ``error:`` line a failed command printed (and no traceback)."""
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    return errors[0]


def end(proc: subprocess.Popen | None, grace: float = 20) -> None:
    """Stop a server a test started: SIGTERM, then SIGKILL after ``grace`` seconds; reaped."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV, "GIT_CEILING_DIRECTORIES": str(cwd.parent)}
    out = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {out.stderr}")
    return out.stdout.strip()


def make_repo(path: Path, files: dict[str, str], message: str = "initial") -> str:
    """Create a git repository with ``files`` committed; returns the commit SHA."""
    path.mkdir(parents=True, exist_ok=True)
    if not (path / ".git").exists():
        git(path, "init", "-q", "-b", "main")
    for rel, text in files.items():
        f = path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(textwrap.dedent(text))
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", message)
    return git(path, "rev-parse", "HEAD")


def make_patch(repo: Path, base: str, change: dict[str, str], message: str, out_dir: Path, number: int) -> Path:
    """Commit ``change`` on top of HEAD and write it with format-patch as NNNN-*.patch."""
    make_repo(repo, change, message)
    out_dir.mkdir(parents=True, exist_ok=True)
    git(repo, "format-patch", "-q", "--zero-commit", "--no-signature", f"--start-number={number}", "-o", str(out_dir),
        "HEAD~1..HEAD")
    return sorted(out_dir.glob(f"{number:04d}-*.patch"))[-1]


def bare_mirror(repo: Path, mirror_dir: Path, name: str) -> Path:
    mirror_dir.mkdir(parents=True, exist_ok=True)
    dest = mirror_dir / f"{name}.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(dest)], check=True, env={**os.environ, **GIT_ENV})
    return dest


TINY_CMAKE = {
    "CMakeLists.txt": """\
        cmake_minimum_required(VERSION 3.20)
        project(tiny C)
        set(GREETING "hello" CACHE STRING "what hello prints")
        add_executable(hello hello.c)
        target_compile_definitions(hello PRIVATE GREETING="${GREETING}")
        """,
    "hello.c": """\
        #include <stdio.h>
        int main(void) { puts(GREETING); return 0; }
        """,
}


def project_tree(root: Path, *, pins: str, recipes: dict[str, str],
                 patches: dict[str, dict[str, bytes]] | None = None) -> Path:
    """A project folder (pins.yaml, recipes/, patches/) as the CLI expects it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pins.yaml").write_text(textwrap.dedent(pins))
    (root / "recipes").mkdir(exist_ok=True)
    for name, text in recipes.items():
        (root / "recipes" / f"{name}.yaml").write_text(textwrap.dedent(text))
    for source, files in (patches or {}).items():
        d = root / "patches" / source
        d.mkdir(parents=True, exist_ok=True)
        for fname, data in files.items():
            (d / fname).write_bytes(data)
    return root


def tiny_recipe(name: str = "tiny", source: str = "tiny", greeting: str = "hello", extra: str = "") -> str:
    return f"""\
        schema: 1
        name: {name}
        description: a tiny C program
        backends: [cpu]
        components:
          - name: hello
            source: {source}
            defines:
              GREETING: "{greeting}"
            targets: [hello]
            outputs:
              hello: hello
        {extra}
        """


def run_cli(root: Path, *args: str, env: dict[str, str] | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess against the project folder ``root``."""
    import sys

    from _shared import on_test_workspace

    full_env = {k: v for k, v in os.environ.items() if k not in ("ONEBIT_MIRROR_DIR", "ONEBIT_WORKSPACE")}
    full_env.update({"ONEBIT_ROOT": str(root), **(env or {})})
    with on_test_workspace(args):
        return subprocess.run([sys.executable, "-m", "onebit_build", *args], cwd=root, env=full_env,
                              capture_output=True, text=True, timeout=timeout)


def user_workspace() -> Path | None:
    """The workspace the README's ``onebit-build`` uses, when it holds anything to share."""
    from onebit_build.core.workspace import default_workspace

    ws = default_workspace()
    return ws if (ws / "git").is_dir() or (ws / "models").is_dir() else None


def shared_from_user(workspace: Path) -> tuple[str, ...]:
    """CLI arguments that let the test workspace fetch from the user's workspace (its bare
    repositories as mirrors) instead of the network; none when there is nothing to share."""
    user = user_workspace()
    if user is None or user.resolve() == workspace.resolve() or not (user / "git").is_dir():
        return ()
    return ("--mirror-dir", str(user / "git"))


def sources_from_workspaces(ws: Path) -> tuple[str, ...]:
    """Arguments that let a build in the new workspace ``ws`` fetch the pinned sources from
    the user's and the test suite's workspaces where they hold them (no network then)."""
    from conftest import workspace_for_tests

    args = shared_from_user(ws)
    tests_git = workspace_for_tests() / "git"
    if (tests_git / "llama.cpp.git").is_dir():
        args += ("--mirror-dir", str(tests_git))
    return args


def stream_cli(root: Path, *args: str, say=None, timeout: float = 3600) -> tuple[int, str]:
    """Run the real CLI like ``run_cli``, passing each line of its progress to ``say`` as it
    comes (the test run shows what it is building). Returns the exit code and the output."""
    import sys

    from _shared import on_test_workspace

    full_env = {k: v for k, v in os.environ.items() if k not in ("ONEBIT_MIRROR_DIR", "ONEBIT_WORKSPACE")}
    full_env["ONEBIT_ROOT"] = str(root)
    lines: list[str] = []
    started = time.monotonic()
    argv = [sys.executable, "-m", "onebit_build", *args]
    with on_test_workspace(args), subprocess.Popen(argv, cwd=root, env=full_env, text=True, stdout=subprocess.PIPE,
                                                   stderr=subprocess.STDOUT) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if say is not None and line.strip():
                say(line.rstrip())
        rc = proc.wait(timeout=timeout)
    if say is not None:
        result = "done" if rc == 0 else f"exit {rc}"
        say(f"onebit-build {' '.join(args)}: {result} in {time.monotonic() - started:.1f} s")
    return rc, "".join(lines)


def build_default_server(workspace: Path, say=None) -> Path:
    """Build the real default recipe (cached in ``workspace``) and return llama-server."""
    rc, out = stream_cli(REPO, "--workspace", str(workspace), *shared_from_user(workspace), "build", say=say)
    if rc != 0:
        raise AssertionError(f"default build failed:\n{out}")
    from onebit_build.checking.manifest import read_manifest
    from onebit_build.checking.manifest import latest_path as manifest_path
    from onebit_build.core.workspace import Workspace

    doc = read_manifest(manifest_path(Workspace(root=workspace), "default"))
    for comp in doc["components"]:
        for o in comp["outputs"]:
            if o["name"] == "llama-server":
                return Path(o["path"])
    raise AssertionError("no llama-server in the manifest")


def default_model(workspace: Path) -> Path:
    """The default recipe's model, taken from the user's workspace when it is there (the
    download is checked by content all the same), else fetched into ``workspace``."""
    from onebit_build.spec.recipe import load_recipe
    from onebit_build.spec.pins import load_pins
    from onebit_build.running.model import ensure_model

    pins = load_pins(REPO / "pins.yaml")
    recipe = load_recipe(REPO / "recipes" / "default.yaml", pins)
    assert recipe.model is not None
    user = user_workspace()
    cache = workspace / "models"
    if user is not None and (user / "models" / recipe.model.file).is_file():
        cache = user / "models"
    mf = ensure_model(recipe.model, cache_dir=cache, offline=False, log=workspace / "model-test.log")
    return mf.path


def only_find_links(monkeypatch, folder: Path) -> Path:
    """Make ``folder`` (a find-links folder) pip's only package source for one test."""
    folder.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    return folder


@contextlib.contextmanager
def serving(spec):
    """A healthy real llama-server for the ``with`` block; stopped when the block ends, however."""
    from onebit_build.running.server import start

    server = start(spec)
    try:
        yield server
    finally:
        server.stop()


# What the default recipe's ggml part links (ggml-base, ggml-cpu, ggml), its first library
# alone, and the vulkan recipe's backend library (libggml-vulkan and libggml-base, with every
# SPIR-V shader it embeds).
GGML_PARTS = {"ggml": "bin/libggml*.so*", "ggml-base": "bin/libggml-base.so*", "ggml-vulkan": "bin/libggml*.so*"}


def ggml_only_project(root: Path, target: str = "ggml", recipe: str = "default") -> Path:
    """A copy of this project whose ``recipe`` builds only ``target`` of ggml, with the same
    defines, so every compile command is the recipe's own. ``ggml`` (libggml-base,
    libggml-cpu and libggml: the CPU kernels, ggml's version string and the run path that
    links them) is about a tenth of the default build's compile time, ``ggml-base`` (nine
    objects, no kernel) about a third of that, ``ggml-vulkan`` (of the vulkan recipe) every
    shader and its library without the llama part: the tests that need one more cold,
    uncached or second build of the real sources (a Redis filled from nothing, the uncached
    'verify --rebuild', the shaders in a second workspace) build the part their point needs."""
    import yaml

    root.mkdir(parents=True, exist_ok=True)
    for name in ("pins.yaml", "models.lock"):
        if (REPO / name).is_file():
            (root / name).write_bytes((REPO / name).read_bytes())
    for name in ("patches", "smoke", "references"):
        if (REPO / name).is_dir():
            (root / name).symlink_to(REPO / name, target_is_directory=True)
    doc = yaml.safe_load((REPO / "recipes" / f"{recipe}.yaml").read_text())
    (llama,) = doc["components"]
    llama["targets"] = [target]
    llama["outputs"] = {"libraries": GGML_PARTS[target]}
    (root / "recipes").mkdir()
    (root / "recipes" / f"{recipe}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return root


def cache_programs(build_dir: Path) -> set[str]:
    """The compiler caches a build folder's ninja files put in front of the compiler: a
    launcher is written into build.ninja, ggml's own choice (RULE_LAUNCH_COMPILE) into
    the rules."""
    text = (build_dir / "CMakeFiles" / "rules.ninja").read_text() + (build_dir / "build.ninja").read_text()
    return {m.group(1) for m in re.finditer(r"(?:^|[\s/])(s?ccache)(?=\s)", text)}


def run_in_terminal(argv: list[str], env: dict[str, str], timeout: float = 600) -> tuple[int, str]:
    """Run ``argv`` with a pseudo-terminal as its stdin, stdout and stderr (as a person's
    shell would); its exit code and all it wrote, escape sequences included."""
    master, slave = os.openpty()
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed its side
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    if proc.poll() is None and time.monotonic() >= deadline:
        proc.kill()
    return proc.wait(timeout=60), b"".join(chunks).decode("utf-8", "replace")


def speed_measures(pairs: list[tuple[float, float]], prompts: int = 1) -> list:
    """A verification run's speed rounds: (working, new) tok/s, the same on every prompt."""
    from onebit_build.verify_run import speed

    out = []
    for rnd, (w, n) in enumerate(pairs, start=1):
        for p in range(prompts):
            out.append(speed.Measure(round=rnd, side="working", prompt=f"p{p}", tok_s=w))
            out.append(speed.Measure(round=rnd, side="new", prompt=f"p{p}", tok_s=n))
    return out


# The bench's lock, held by another process (tests/test_bench.py, test_bench_real.py).
HOLDER = textwrap.dedent("""\
    import sys, time
    from pathlib import Path
    from onebit_build.running.bench import BenchLock
    with BenchLock(Path(sys.argv[1]), "holder-test-bench"):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
""")


def hold_lock(path: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process that holds the bench lock for ``seconds``; returns once it holds it."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), str(seconds)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    return holder
