"""The name rules of onebit_build.core.names, and the loaders that use them. Pure."""

from __future__ import annotations

import pytest

from onebit_build.core import names


@pytest.mark.parametrize("check, good, bad", [
    (names.is_file_name, ["llama.cpp", "hrx-system", "Qwen3_0.6B", "0day"], ["", ".hidden", "-x", "a/b", "a b", "a+b"]),
    (names.is_component_name, ["runtime", "loom-link", "a_b"], ["", "9lives", "a.b", "_x", "a/b"]),
    (names.is_cmake_name, ["GGML_CUDA", "_x", "a1"], ["", "1A", "A-B", "A B", "A;B"]),
    (names.is_fetch_name, ["hsa_runtime_headers", "x" * 64], ["", "_x", "a-b", "x" * 65]),
    (names.is_label, ["t1", "ngl+fa", "v0.1"], ["", "+x", "a b", "a=b"]),
])
def test_each_rule_takes_its_names_and_refuses_others(check, good, bad):
    assert [n for n in good if not check(n)] == []
    assert [n for n in bad if check(n)] == []


@pytest.mark.parametrize("check", [names.is_file_name, names.is_component_name, names.is_cmake_name,
                                   names.is_fetch_name, names.is_label])
def test_a_trailing_newline_is_not_part_of_a_name(check):
    # A pattern with '$' and .match() would take "abc\n": the rules match the whole text.
    assert check("abc") and not check("abc\n")


def test_file_names_may_be_held_to_a_length():
    assert names.is_file_name("a" * 200, max_len=200) and not names.is_file_name("a" * 201, max_len=200)


def test_patch_numbers():
    assert names.patch_number("0003-fix-something.patch") == "0003"
    assert [names.patch_number(n) for n in ("3-fix.patch", "0003-.patch", "0003-fix.patch.orig", "0003-a b.patch")] \
        == [None] * 4


def test_file_part_replaces_each_character_and_label_part_each_run():
    assert names.file_part("a b/c..d+e") == "a_b_c..d_e"
    assert names.label_part("Vulkan0 (llvm/pipe)+x") == "Vulkan0_llvm_pipe_+x"


@pytest.mark.parametrize("rel, inside", [
    ("bin/llama-server", True), ("lib/*.so", True), ("", False), ("/abs", False), ("a/../../b", False),
    ("a\\b", False), ("C:/x", False), ("a\0b", False),
])
def test_relative_inside(rel, inside):
    assert names.relative_inside(rel) is inside


def test_plain_names_have_no_folder_part():
    assert names.plain_name("model.gguf")
    assert not any(names.plain_name(n) for n in ("", ".", "..", "a/b", "a\\b"))


@pytest.mark.parametrize("name, link, sym, hard, why", [
    ("", None, False, False, "empty"),
    ("\\x", None, False, False, "absolute"),
    ("pkg\\..\\x", None, False, False, "backslash"),
    ("C:/x", None, False, False, "drive letter"),
    ("pkg/hard", None, False, True, "without target"),
    ("pkg/hard", "pkg/other", False, True, None),
    ("pkg/hard", "../x", False, True, "escaping"),
    ("a/b/link", "../../../x", True, False, "escaping"),
    ("a/b/link", "../../x", True, False, None),
])
def test_member_problem(name, link, sym, hard, why):
    got = names.member_problem(name, link=link, symlink=sym, hardlink=hard)
    assert got is None if why is None else (got is not None and why in got)
