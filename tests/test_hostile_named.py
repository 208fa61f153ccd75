"""Files and folders a user names on the command line, when they are not what the option takes:
a FIFO, a folder or a device where a file is read, a file far larger than what it should hold,
a folder where a file is written, a file where a folder is. Every path option is checked by
kind before any work (``commands/_options.py`` through ``safepath.check_kind``), and every named file is
read by one reader (``safepath.read_regular``: regular files only, never blocking, its cap
checked before a byte is read). Each through the real CLI, with a timeout: nothing hangs."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from _support import REPO, one_line_error


def cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None, limit_as: int | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess:
    """The real CLI on the checkout's project, with a workspace of its own (never made by a
    refused run); ``limit_as``: the most address space the run may take, in bytes."""
    full = {k: v for k, v in os.environ.items() if k not in ("ONEBIT_WORKSPACE", "ONEBIT_MIRROR_DIR",
                                                                 "ONEBIT_SIGNING_KEY")}
    full.update({"ONEBIT_ROOT": str(REPO), "XDG_CACHE_HOME": str(tmp_path / "cache"), **(env or {})})

    def cap() -> None:
        if limit_as:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))
    return subprocess.run([sys.executable, "-m", "onebit_build", "--workspace", str(tmp_path / "ws"), *args],
                          capture_output=True, text=True, cwd=tmp_path, env=full, timeout=timeout, preexec_fn=cap)


# The options that read a file, with THING where the path goes, and the name the message gives.
READ = [
    ("PATH", ("verify-provenance", "THING")),
    ("--key", ("verify-provenance", "DIR", "--key", "THING")),
    ("--recipe", ("--recipe", "THING", "plan")),
    ("--signing-key", ("--signing-key", "THING", "build")),
    ("--api-key-file", ("serve", "--api-key-file", "THING")),
    ("--reference", ("verify", "--reference", "THING")),
    ("--expect", ("bench", "--expect", "THING")),
    ("--model", ("--model", "THING", "smoke")),
    ("--server", ("smoke", "--server", "THING")),
]


def _args(args: tuple[str, ...], thing: Path, folder: Path) -> list[str]:
    return [{"THING": str(thing), "DIR": str(folder)}.get(a, a) for a in args]


@pytest.mark.parametrize("flag, args", READ, ids=[f for f, _ in READ])
def test_a_fifo_at_a_file_option_is_named_at_once(tmp_path, flag, args):
    """Before: `serve --api-key-file`, `verify --reference` and `bench --expect` waited for a
    writer until killed; PATH, --recipe, --model and --server said 'no such file'."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    r = cli(tmp_path, *_args(args, fifo, tmp_path), timeout=30)
    assert r.returncode == 2, r.stderr
    line = one_line_error(r)
    assert f"{flag} {fifo} is a FIFO (named pipe), not a file" in line, line
    assert not (tmp_path / "ws").exists()  # refused before any work


@pytest.mark.parametrize("flag, args", [(f, a) for f, a in READ if f not in ("PATH", "--reference")],
                         ids=[f for f, _ in READ if f not in ("PATH", "--reference")])
def test_a_folder_or_a_device_at_a_file_option_is_named_as_what_it_is(tmp_path, flag, args):
    folder = tmp_path / "folder"
    folder.mkdir()
    for thing, kind in ((folder, "a folder"), (Path("/dev/null"), "a character device")):
        r = cli(tmp_path, *_args(args, thing, tmp_path), timeout=30)
        assert r.returncode == 2, r.stderr
        assert f"{flag} {thing} is {kind}, not a file" in one_line_error(r)


def test_a_fifo_named_by_a_variable_is_refused_by_the_reader(tmp_path):
    """$ONEBIT_SIGNING_KEY is no option: the reader itself refuses it, without waiting."""
    from onebit_build.core.errors import ConfigError
    from onebit_build.evidence.keys import load_signing_key

    os.mkfifo(tmp_path / "key.pem")
    with pytest.raises(ConfigError) as err:
        load_signing_key(tmp_path / "key.pem", "$ONEBIT_SIGNING_KEY")
    assert err.value.exit_code == 2 and "is a FIFO (named pipe), not a file" in str(err.value)


GIB = 1 << 30
SMALL_AS = 768 << 20  # the most address space a run below may take: less than the file


def sparse_gigabyte(path: Path) -> Path:
    with open(path, "wb") as f:
        f.truncate(GIB)
    return path


def test_a_sparse_gigabyte_statement_is_refused_before_it_is_read(tmp_path):
    """Before: verify-provenance read a 1 GB statement whole (2.1 GB of memory) before saying
    it was too large; under a memory limit, a MemoryError traceback. Now the size is checked
    before a byte is read: the run fits in less memory than the file."""
    big = sparse_gigabyte(tmp_path / "big.intoto.jsonl")
    r = cli(tmp_path, "verify-provenance", str(big), limit_as=SMALL_AS)
    assert r.returncode == 11, r.stderr[-2000:]
    assert f"statement {big} is 1 GiB, more than the 32 MiB a statement may hold" in one_line_error(r)


@pytest.mark.parametrize("flag, args, cap", [
    ("--key", ("verify-provenance", "DIR", "--key", "THING"), "64 KiB"),
    ("recipe file", ("--recipe", "THING", "plan"), "4 MiB"),
    ("--api-key-file", ("serve", "--api-key-file", "THING"), "64 KiB"),
    ("--expect", ("bench", "--expect", "THING"), "16 MiB"),
], ids=["key", "recipe", "api-key-file", "expect"])
def test_a_sparse_gigabyte_at_a_file_option_is_refused_before_it_is_read(tmp_path, flag, args, cap):
    """Before: --key, --recipe and the others read the file whole (a MemoryError traceback
    under a memory limit); now its cap is named before a byte is read."""
    big = sparse_gigabyte(tmp_path / "big.yaml")
    r = cli(tmp_path, *_args(args, big, tmp_path), limit_as=SMALL_AS)
    assert r.returncode == 2, r.stderr[-2000:]
    line = one_line_error(r)
    assert str(big) in line and flag in line and f"is 1 GiB, more than the {cap}" in line, line


def test_the_reader_refuses_a_file_that_grew_past_its_cap(tmp_path):
    from onebit_build.core.safepath import TooLarge, read_regular

    f = tmp_path / "f"
    f.write_bytes(b"x" * 100)
    assert read_regular(f, limit=100) == b"x" * 100
    with pytest.raises(TooLarge):
        read_regular(f, limit=99)


# --------------------------------------------------------------------------- files and folders to write

WRITE = [
    ("--write-reference", ("verify", "--write-reference", "THING")),
    ("--junit", ("verify-run", "--working", "DIR", "--junit", "THING")),
    ("--junit", ("smoke", "--junit", "THING")),
    ("--lock", ("bench", "--lock", "THING")),
    ("--lock", ("verify-run", "--working", "DIR", "--lock", "THING")),
]
WRITE_IDS = ["write-reference", "verify-run-junit", "smoke-junit", "bench-lock", "verify-run-lock"]


@pytest.mark.parametrize("flag, args", WRITE, ids=WRITE_IDS)
def test_a_file_to_write_that_is_a_folder_or_a_fifo_is_refused_before_any_work(tmp_path, flag, args):
    """Before: `verify --write-reference DIR`, `verify-run --junit DIR` and `smoke --junit DIR`
    were found only after the work (after a passing smoke), exit 1 naming a temporary file;
    `--lock FIFO` was exit 1 "Invalid argument"."""
    folder, fifo = tmp_path / "folder", tmp_path / "pipe"
    folder.mkdir()
    os.mkfifo(fifo)
    for thing, kind in ((folder, "a folder"), (fifo, "a FIFO (named pipe)")):
        r = cli(tmp_path, *_args(args, thing, tmp_path), timeout=30)
        assert r.returncode == 2, r.stderr
        assert f"{flag} {thing} is {kind}, not a file" in one_line_error(r)
        assert not (tmp_path / "ws").exists()  # refused before any work


def test_a_file_to_write_below_a_file_is_refused_before_any_work(tmp_path):
    (tmp_path / "a-file").write_text("x")
    r = cli(tmp_path, "smoke", "--junit", str(tmp_path / "a-file" / "junit.xml"), timeout=30)
    assert r.returncode == 2, r.stderr
    assert f"cannot be made: {tmp_path / 'a-file'} is not a folder" in one_line_error(r)


@pytest.mark.parametrize("where", ["bin", "share/onebit-build", "share"])
def test_an_install_prefix_with_a_file_where_a_folder_goes_is_refused_before_anything_is_made(tmp_path, where):
    """Before: exit 1 "File exists" after the build, and a new empty bin/ left behind."""
    prefix = tmp_path / "prefix"
    (prefix / where).parent.mkdir(parents=True, exist_ok=True)
    (prefix / where).write_text("a file")
    before = sorted(prefix.rglob("*"))
    r = cli(tmp_path, "install", "--prefix", str(prefix), timeout=30)
    assert r.returncode == 14, r.stderr
    assert f"--prefix {prefix}: {prefix / where} is a file, not a folder" in one_line_error(r)
    assert sorted(prefix.rglob("*")) == before  # nothing made: no empty bin/
    assert not (tmp_path / "ws").exists()


@pytest.mark.parametrize("args", [("builds",), ("gc",), ("gc", "--dry-run"), ("location",)], ids=" ".join)
def test_a_workspace_that_is_a_file_is_refused_by_the_commands_that_only_read_it(tmp_path, args):
    """Before: `builds` said "no builds" and `gc` "nothing to remove" (exit 0), `location`
    exit 12 "damaged"."""
    ws = tmp_path / "ws"
    ws.write_text("a file")
    r = cli(tmp_path, *args, timeout=30)
    assert r.returncode == 14, r.stderr
    assert f"workspace {ws} is a file, not a folder" in one_line_error(r)
    assert ws.read_text() == "a file"
