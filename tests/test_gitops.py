"""git runs through the one process runner: echoed, logged, a typed error with git's own
message, and its whole process group stopped on Ctrl-C. Real git, real repositories."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from _support import git, make_repo, sigint_default
from onebit_build.core.errors import CommandError
from onebit_build.core.gitops import Git

# A git alias that runs a program of its own, so the test can see whether git's children
# outlive an interrupted call. The odd duration names this test's sleep among all others.
NAP = "313.25"
NAP_ENV = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "alias.nap", "GIT_CONFIG_VALUE_0": f"!sleep {NAP}"}


def naps() -> list[int]:
    """Pids of this test's sleep, wherever it runs."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[:2] == [b"sleep", NAP.encode()]:
                found.append(int(entry.name))
    return found


def test_failure_is_a_typed_error_with_gits_message_and_the_log(tmp_path):
    make_repo(tmp_path / "r", {"a.txt": "x\n"})
    log = tmp_path / "git.log"
    g = Git(tmp_path / "r", log=log)
    with pytest.raises(CommandError) as err:
        g.run("rev-parse", "--verify", "no-such-branch^{commit}", what="looking up the branch")
    assert "looking up the branch failed (exit 128)" in str(err.value)
    assert "Needed a single revision" in err.value.tail
    text = log.read_text()
    assert "rev-parse --verify 'no-such-branch^{commit}'" in text and "# exit 128" in text
    assert "fatal: Needed a single revision" in text


def test_stdout_and_stderr_come_back_apart(tmp_path):
    sha = make_repo(tmp_path / "r", {"a.txt": "x\n"})
    res = Git(tmp_path / "r").run("rev-parse", "HEAD", "--verify", "nope", check=False)
    assert res.out.splitlines()[0] == sha and "nope" not in res.out
    assert res.status != 0 and res.err


def test_has_commit_answers_for_commits_only(tmp_path):
    sha = make_repo(tmp_path / "r", {"a.txt": "x\n"})
    git(tmp_path / "r", "gc", "-q")  # the commit now lives in a pack
    blob = git(tmp_path / "r", "rev-parse", "HEAD:a.txt")
    bare = tmp_path / "s.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(tmp_path / "r"), str(bare)], check=True)
    for g in (Git(tmp_path / "r"), Git(bare, bare=True)):
        assert g.has_commit(sha) and g.has_commit(sha[:10])
        assert not g.has_commit(blob)  # an object, but not a commit
        assert not g.has_commit("0" * 40) and not g.has_commit("deadbeef") and not g.has_commit("zz")


def test_ctrl_c_stops_git_and_everything_it_started(tmp_path):
    make_repo(tmp_path / "r", {"a.txt": "x\n"})
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from onebit_build.core.gitops import Git
        try:
            Git(Path({str(tmp_path / 'r')!r})).run("nap", env={NAP_ENV!r})
        except KeyboardInterrupt:
            sys.exit(130)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], preexec_fn=sigint_default)
    try:
        deadline = time.monotonic() + 30
        while not naps() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert naps(), "git's child never started"
        os.kill(child.pid, signal.SIGINT)  # the tool alone, as a terminal's Ctrl-C reaches it
        assert child.wait(timeout=30) == 130
        deadline = time.monotonic() + 10
        while naps() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert naps() == [], "git's child outlived the interrupted call"
    finally:
        child.kill()
        for pid in naps():
            os.kill(pid, signal.SIGKILL)


def test_ctrl_c_while_git_starts_stops_it_too(tmp_path):
    """A Ctrl-C that lands after git has forked but before the tool has it on its list (made
    a wide window here: the listing waits 3 s) is held until then: git's group is stopped."""
    make_repo(tmp_path / "r", {"a.txt": "x\n"})
    marker = tmp_path / "listing"
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from onebit_build.core import reaper
        from onebit_build.core.gitops import Git
        own = reaper.own
        def slow_own(pgid):
            Path({str(marker)!r}).write_text("")
            time.sleep(3)
            own(pgid)
        reaper.own = slow_own
        try:
            Git(Path({str(tmp_path / 'r')!r})).run("nap", env={NAP_ENV!r})
        except KeyboardInterrupt:
            sys.exit(130)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], preexec_fn=sigint_default)
    try:
        deadline = time.monotonic() + 30
        while not (naps() and marker.exists()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert naps() and marker.exists(), "git's child never started"
        os.kill(child.pid, signal.SIGINT)  # while the tool is still listing git's group
        assert child.wait(timeout=30) == 130
        deadline = time.monotonic() + 10
        while naps() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert naps() == [], "git's child outlived a Ctrl-C that came while git started"
    finally:
        child.kill()
        for pid in naps():
            os.kill(pid, signal.SIGKILL)
