"""The name a server lists its model by: the recipe's model name, checked at load, given to
llama-server as --alias (a user's own --alias wins)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from onebit_build.spec.recipe import load_recipe
from onebit_build.core.errors import ConfigError
from onebit_build.spec.model_spec import ModelSpec, served_name
from onebit_build.spec.pins import load_pins
from onebit_build.running.server_args import ServerSpec, server_argv

REPO = Path(__file__).resolve().parent.parent
SHA = "a" * 64


def _recipe_with_model_name(tmp_path: Path, name: object) -> Path:
    doc = yaml.safe_load((REPO / "recipes" / "default.yaml").read_text())
    doc["model"]["name"] = name
    path = tmp_path / "recipes" / "default.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize("name", ["a,b", "-x", "../up", "two words", "", "x" * 129, "ünï"])
def test_a_model_name_the_server_cannot_list_is_refused_at_load(tmp_path, name):
    path = _recipe_with_model_name(tmp_path, name)
    lines = path.read_text().splitlines()
    start = lines.index("model:")
    line = next(i for i in range(start, len(lines)) if lines[i].startswith("  name:")) + 1
    with pytest.raises(ConfigError) as e:
        load_recipe(path, load_pins(REPO / "pins.yaml"))
    assert str(e.value).startswith(f"{path}:{line}: model.name: "), str(e.value)
    assert "use letters, digits" in (e.value.hint or "")


def test_every_project_recipe_has_a_listable_model_name():
    pins = load_pins(REPO / "pins.yaml")
    names = [load_recipe(p, pins).model for p in sorted((REPO / "recipes").glob("*.yaml"))]
    assert [m.name for m in names if m is not None]  # loading refused none


def test_served_name_is_the_recipe_name_only_for_the_recipe_file():
    spec = ModelSpec(name="gemma-3-270m-q4_k_m", file="g.gguf", sha256=SHA)
    assert served_name(spec, sha256=SHA, file=Path("/m/g.gguf")) == "gemma-3-270m-q4_k_m"
    # Another file (--model of a different model) keeps its own name, made safe.
    assert served_name(spec, sha256="b" * 64, file=Path("/m/My Model,v2.gguf")) == "My_Model_v2"
    assert served_name(None, sha256=SHA, file=Path("/m/-.gguf")) == "model"
    unpinned = ModelSpec(name="user-model", file="u.gguf", path_env="X")
    assert served_name(unpinned, sha256=SHA, file=Path("/m/u.gguf")) == "user-model"


def test_server_argv_gives_the_alias_unless_the_user_does():
    base = dict(binary=Path("bin/llama-server"), model=Path("/m/g.gguf"), log=Path("l"), threads=2)
    argv = server_argv(ServerSpec(**base, alias="gemma"), 8123)
    assert argv[argv.index("--alias") + 1] == "gemma"
    assert argv[-2:] == ["-t", "2"]
    assert "--alias" not in server_argv(ServerSpec(**base), 8123)
    mine = server_argv(ServerSpec(**base, alias="gemma", extra_args=("-a", "mine")), 8123)
    assert mine.count("-a") == 1 and "--alias" not in mine and mine[-2:] == ["-a", "mine"]
    eq = server_argv(ServerSpec(**base, alias="gemma", extra_args=("--alias=mine",)), 8123)
    assert "gemma" not in eq
