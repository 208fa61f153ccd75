"""Options: the pure rules that turn arguments into what a run does (no I/O)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onebit_build.spec.recipe import Component, Recipe
from onebit_build.core.errors import ConfigError
from onebit_build.commands import by_name
from onebit_build.commands._job import needs
from onebit_build.commands._options import from_args, recipe_choice
from onebit_build.job.settings import recipe_is_file
from onebit_build.spec.defines import Define, parse_define
from onebit_build.job.job import with_defines


def test_recipe_choice():
    assert recipe_choice(recipe=None, hrx=None) == "default"
    assert recipe_choice(recipe="vulkan", hrx="off") == "vulkan"
    assert recipe_choice(recipe=None, hrx="on") == "strix-halo"
    assert recipe_choice(recipe="strix-halo", hrx="on") == "strix-halo"
    with pytest.raises(ConfigError, match="--hrx on selects recipe 'strix-halo', but --recipe 'cuda'"):
        recipe_choice(recipe="cuda", hrx="on")


def test_recipe_names_and_files_are_told_apart():
    assert not recipe_is_file("default")
    assert recipe_is_file("mine.yaml") and recipe_is_file("recipes/x.yml") and recipe_is_file("./x")


@pytest.mark.parametrize("text, want", [
    ("GGML_NATIVE=OFF", Define(component=None, name="GGML_NATIVE", value="OFF")),
    ("GGML_NATIVE:BOOL=OFF", Define(component=None, name="GGML_NATIVE", value="OFF")),
    ("llama:LLAMA_CURL=OFF", Define(component="llama", name="LLAMA_CURL", value="OFF")),
    ("CMAKE_C_FLAGS=-O2 -g", Define(component=None, name="CMAKE_C_FLAGS", value="-O2 -g")),
    ("EMPTY=", Define(component=None, name="EMPTY", value="")),
])
def test_parse_define(text, want):
    assert parse_define(text) == want
    assert parse_define(want.render()) == want


@pytest.mark.parametrize("bad", ["NOVALUE", "=x", "1ABC=2", "a b=c"])
def test_parse_define_refuses_with_the_form_expected(bad):
    with pytest.raises(ConfigError, match="expected NAME=VALUE or COMPONENT:NAME=VALUE"):
        parse_define(bad)


def _recipe() -> Recipe:
    comps = (
        Component(name="runtime", source="rt", defines=(("A", "1"),), outputs=(("lib", "lib/x.so"),)),
        Component(name="llama", source="llama.cpp", defines=(("GGML_NATIVE", "OFF"), ("B", "2")),
                  outputs=(("llama-server", "bin/llama-server"),)),
    )
    return Recipe(name="r", path=Path("r.yaml"), description="", backends=("cpu",), components=comps)


def test_defines_go_to_the_server_component_unless_named():
    r = with_defines(_recipe(), (parse_define("GGML_NATIVE=ON"), parse_define("NEW=x"), parse_define("runtime:A=9")))
    assert dict(r.component("llama").defines) == {"GGML_NATIVE": "ON", "B": "2", "NEW": "x"}
    assert dict(r.component("runtime").defines) == {"A": "9"}
    assert [c.name for c in r.components] == ["runtime", "llama"]
    assert with_defines(_recipe(), ()) == _recipe()


def test_define_for_an_unknown_component_names_the_known_ones():
    with pytest.raises(ConfigError, match="has no component 'nope'") as e:
        with_defines(_recipe(), (parse_define("nope:X=1"),))
    assert "runtime, llama" in e.value.hint


def test_from_args_is_the_one_place_arguments_become_options(tmp_path):
    from onebit_build.commands.parser import make_parser

    ns = make_parser().parse_args(["--workspace", str(tmp_path), "-D", "X=1", "build", "-j", "3", "-D", "Y=2",
                                   "--offline"])
    opts = from_args(ns)
    assert opts.command == "build" and opts.jobs == 3 and opts.offline and opts.workspace == tmp_path.resolve()
    assert [d.render() for d in opts.defines] == ["X=1", "Y=2"]
    ns = make_parser().parse_args(["--workspace", str(tmp_path), "serve", "--port", "9000", "--", "--threads", "2"])
    opts = from_args(ns)
    assert opts.own.port == 9000 and opts.own.extra == ("--threads", "2") and needs(by_name("serve"), opts).git
    (tmp_path / "s").write_bytes(b"")  # the path options name what is there, checked when parsed
    ns = make_parser().parse_args(["--workspace", str(tmp_path), "smoke", "--server", str(tmp_path / "s")])
    assert not needs(by_name("smoke"), from_args(ns)).git  # smoking a binary built elsewhere fetches nothing
    assert from_args(make_parser().parse_args(["--workspace", str(tmp_path), "plan"])).dry_run


def test_dry_run_only_where_it_means_something():
    from onebit_build.commands.parser import make_parser

    for cmd in ("build", "smoke", "fetch", "patch", "all", "verify"):
        assert make_parser().parse_args([cmd, "--dry-run"]).dry_run
    for cmd in ("doctor", "recipes", "serve"):
        with pytest.raises(SystemExit):
            make_parser().parse_args([cmd, "--dry-run"])


def test_install_tree_copies_outputs_with_their_links(tmp_path):
    from types import SimpleNamespace

    from onebit_build.distribution.install import install_tree

    bdir = tmp_path / "build" / "bin"
    bdir.mkdir(parents=True)
    (bdir / "llama-server").write_bytes(b"\x7fELF server")
    (bdir / "llama-server").chmod(0o755)
    (bdir / "libllama.so.0.5.0").write_bytes(b"lib")
    (bdir / "libllama.so.0").symlink_to("libllama.so.0.5.0")
    (bdir / "libllama.so").symlink_to("libllama.so.0")
    man = tmp_path / "build" / "build-manifest.json"
    man.write_text("{}")
    outs = [SimpleNamespace(name="llama-server", path=bdir / "llama-server"),
            SimpleNamespace(name="libllama", path=bdir / "libllama.so.0.5.0")]
    prefix = tmp_path / "prefix"
    files = install_tree([SimpleNamespace(outputs=outs, build_dir=tmp_path / "build")], man, prefix)
    assert (prefix / "bin" / "llama-server").read_bytes() == b"\x7fELF server"
    assert (prefix / "bin" / "llama-server").stat().st_mode & 0o111
    assert (prefix / "bin" / "libllama.so.0").readlink() == Path("libllama.so.0.5.0")
    assert (prefix / "bin" / "libllama.so").resolve() == (prefix / "bin" / "libllama.so.0.5.0").resolve()
    assert (prefix / "share" / "onebit-build" / "build-manifest.json").read_text() == "{}"
    assert len(files) == 5
    assert not [p for p in prefix.rglob(".*tmp*")]
