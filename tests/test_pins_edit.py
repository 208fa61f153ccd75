"""What ``pins bump`` writes, and how: pins.yaml edited in place (every other line as it was,
the result loaded and compared), several files replaced all or none, the options checked,
the build number that follows the commit's date."""

from __future__ import annotations

import difflib
from dataclasses import replace

import pytest

from _support import REPO
from onebit_build.commands.pins import bump_options
from onebit_build.core.errors import ConfigError
from onebit_build.core.fsutil import replace_files
from onebit_build.spec.pins import SdistMirror, load_pins
from onebit_build.spec.pins_edit import PinMove, check_moved, moved_text
from onebit_build.workflows.bump import commit_day

OLDER = "4df29be4f4c3673f428170fda944a5b19f743bb8"
SDIST = SdistMirror(package="llama-cpp-python", version="0.3.35",
                    sha256="1139dbb54509074b70893fab8554e3b079aa9f4d312058ce4018ef0019e3de12",
                    git_dir=".git/modules/vendor/llama.cpp")


def changed_lines(a: str, b: str) -> list[str]:
    return [d for d in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
            if d[:1] in "+-" and not d.startswith(("+++", "---"))]


def test_the_sdist_pin_moves_in_place(tmp_path):
    text = (REPO / "pins.yaml").read_text()
    move = PinMove(name="llama.cpp", commit=OLDER, sdist=SDIST, build_number="20260816")
    new = moved_text(text, move)
    assert sorted(changed_lines(text, new)) == sorted([
        "-    commit: 0c1e57098bba43ac29e6e3b677cdceebdd22334f", "-    build_number: 20261001",
        "-      - pypi-sdist: llama-cpp-python==0.3.36",
        "-        sha256: 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e",
        f"+    commit: {OLDER}", "+    build_number: 20260816", "+      - pypi-sdist: llama-cpp-python==0.3.35",
        f"+        sha256: {SDIST.sha256}"])
    (tmp_path / "pins.yaml").write_text(new)
    before, after = load_pins(REPO / "pins.yaml"), load_pins(tmp_path / "pins.yaml")
    check_moved(before, after, (move,))
    assert after.sources["llama.cpp"].mirrors == (SDIST,) and after.sources["llama.cpp"].build_number == "20260816"


def test_an_abbreviated_pin_becomes_a_full_one(tmp_path):
    text = (REPO / "pins.yaml").read_text()
    move = PinMove(name="hrx-system", commit="a" * 40)
    new = moved_text(text, move, had_abbreviated=True)
    assert sorted(changed_lines(text, new)) == sorted(["-    commit: 6743075f", "-    abbreviated: true",
                                                       f"+    commit: {'a' * 40}"])
    (tmp_path / "pins.yaml").write_text(new)
    check_moved(load_pins(REPO / "pins.yaml"), load_pins(tmp_path / "pins.yaml"), (move,))


def test_an_edit_that_does_not_load_as_the_move_says_is_refused(tmp_path):
    text = (REPO / "pins.yaml").read_text()
    move = PinMove(name="hrx", commit="b" * 40)
    (tmp_path / "pins.yaml").write_text(moved_text(text, move))
    with pytest.raises(ConfigError, match="does not load as the move says"):
        check_moved(load_pins(REPO / "pins.yaml"), load_pins(tmp_path / "pins.yaml"), (replace(move, commit="c" * 40),))


@pytest.mark.parametrize("text, why", [
    ("schema: 1\nsources: {x: {url: u, commit: 0c1e57098bba43ac29e6e3b677cdceebdd22334f}}\n", "no such key"),
    ("schema: 1\nsources:\n  x:\n    url: u\n", "expected one 'commit:' line, found 0"),
    ("schema: 1\nsources:\n  x:\n    url: u\n    commit: 0c1e57098bba43ac29e6e3b677cdceebdd22334f\n",
     "no '- pypi-sdist: llama-cpp-python==...' mirror"),
])
def test_a_pin_it_cannot_edit_is_said(text, why):
    with pytest.raises(ConfigError, match=why):
        moved_text(text, PinMove(name="x", commit="a" * 40, sdist=SDIST if "commit:" in text else None))


def test_files_are_replaced_all_or_none(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "sub" / "c"
    a.write_bytes(b"old a")
    b.mkdir()  # a folder where a file is to go: its switch fails after a's
    (b / "inside").write_text("x")
    with pytest.raises(OSError):
        replace_files({a: b"new a", b: b"new b", c: b"new c"})
    assert a.read_bytes() == b"old a" and (b / "inside").read_text() == "x" and not c.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "sub"]  # no temporary file is left
    replace_files({a: b"new a", c: b"new c", b / "inside": None})
    assert a.read_bytes() == b"new a" and c.read_bytes() == b"new c" and not (b / "inside").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "sub"]


def test_the_build_number_follows_the_committer_date_in_its_own_zone():
    # 1759361400 is 2025-10-01 23:30 UTC
    assert commit_day("tree x\ncommitter A <a@b> 1759361400 +0000\n\nmsg") == "20251001"
    assert commit_day("tree x\ncommitter A <a@b> 1759361400 +0200\n\nmsg") == "20251002"
    assert commit_day("committer A <a@b> 1759361400 -0100\n") == "20251001"


@pytest.mark.parametrize("args, why", [
    ({"bump_source": "llama.cpp"}, "needs --to COMMIT or --to-sdist"),
    ({"bump_source": "llama.cpp", "bump_to": "0c1e570"}, "not a full commit SHA"),
    ({"bump_source": "llama.cpp", "bump_sdist": "llama-cpp-python>=0.3"}, "is not NAME==VERSION"),
    ({"bump_source": "llama.cpp", "bump_sdist": "llama-cpp-python==latest"}, "is not NAME==VERSION"),
    ({"bump_source": "../x", "bump_to": "a" * 40}, "is not a source name"),
    ({"bump_source": "a", "bump_to": "a" * 40, "bump_with": ["a=" + "b" * 40]}, "naming another source once"),
    ({"bump_source": "a", "bump_to": "a" * 40, "bump_with": ["b=; rm -rf /"]}, "not a full commit SHA"),
    ({"bump_source": "a", "bump_to": "a" * 40, "bump_tie_margin": float("inf")}, "not between 0 and 5 nats"),
])
def test_bump_options_are_checked(args, why):
    with pytest.raises(ConfigError, match=why):
        bump_options(args)


def test_bump_options_as_given():
    bo = bump_options({"bump_source": "llama.cpp", "bump_sdist": "llama-cpp-python==0.3.35",
                       "bump_with": ["hrx-system=" + "C" * 40], "bump_rounds": 2})
    assert bo.sdist == ("llama-cpp-python", "0.3.35") and bo.to is None
    assert bo.coupled == (("hrx-system", "c" * 40),) and bo.rounds == 2
