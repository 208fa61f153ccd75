"""Loading and validating pins, lock files and recipes."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import yaml

from onebit_build.spec.recipe import load_recipe, order_components, Component
from onebit_build.spec.pins import apply_lock, load_pins, read_lock, render_lock
from onebit_build.core.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent

PINS = """\
schema: 1
sources:
  a:
    url: https://example.invalid/a.git
    commit: 0123456789abcdef0123456789abcdef01234567
  b:
    url: https://example.invalid/b.git
    commit: abcdef1
    abbreviated: true
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))
    return p


def test_project_pins_and_default_recipe_load():
    pins = load_pins(REPO / "pins.yaml")
    assert set(pins.sources) == {"llama.cpp", "llama.cpp-hrx", "hrx", "hrx-system", "llama.cpp-hrx0", "hrx-system-hrx0"}
    assert pins.sources["llama.cpp-hrx0"].resolved and pins.sources["hrx-system-hrx0"].resolved  # full SHAs
    up = pins.sources["llama.cpp"]
    assert up.commit == "0c1e57098bba43ac29e6e3b677cdceebdd22334f" and up.resolved
    assert up.mirrors[0].package == "llama-cpp-python" and up.mirrors[0].version == "0.3.36"
    assert pins.sources["hrx"].resolved
    assert not pins.sources["hrx-system"].resolved and pins.sources["hrx-system"].abbreviated
    recipe = load_recipe(REPO / "recipes" / "default.yaml", pins)
    defines = dict(recipe.components[0].defines)
    assert defines["GGML_NATIVE"] == "OFF" and defines["LLAMA_BUILD_UI"] == "OFF"
    assert defines["LLAMA_BUILD_COMMIT"] == "${pin.llama.cpp.short}"
    assert recipe.model is not None and len(recipe.model.parts) == 4
    assert recipe.smoke.prompts[0].expect == "Paris" and len(recipe.smoke.prompts) >= 3


def test_malformed_yaml_names_file_and_line(tmp_path):
    p = write(tmp_path, "pins.yaml", "schema: 1\nsources:\n  a: [unclosed\n")
    with pytest.raises(ConfigError) as e:
        load_pins(p)
    assert "pins.yaml" in str(e.value) and "line" in str(e.value) and "malformed YAML" in str(e.value)


def test_unknown_key_is_named_with_fix(tmp_path):
    p = write(tmp_path, "pins.yaml", PINS.replace("    abbreviated: true", "    abbreviated: true\n    comit: x"))
    with pytest.raises(ConfigError) as e:
        load_pins(p)
    msg = str(e.value)
    assert "sources.b.comit" in msg and "unknown key" in msg and "use one of" in msg


@pytest.mark.parametrize("commit,expect", [
    ("not-a-sha", "is not a commit SHA"),
    ("master", "is not a commit SHA"),
    ("0123456", "is abbreviated"),
    ("0123456789abcdef0123456789abcdef0123456z", "is not a commit SHA"),
])
def test_bad_commits_are_refused(tmp_path, commit, expect):
    p = write(tmp_path, "pins.yaml", PINS.replace("0123456789abcdef0123456789abcdef01234567", commit))
    with pytest.raises(ConfigError) as e:
        load_pins(p)
    assert expect in str(e.value) and "sources.a.commit" in str(e.value)


def test_wrong_schema_version(tmp_path):
    p = write(tmp_path, "pins.yaml", PINS.replace("schema: 1", "schema: 7"))
    with pytest.raises(ConfigError, match="schema 7 is not supported"):
        load_pins(p)


def test_lock_resolves_abbreviated_and_locked_refuses_unresolved(tmp_path):
    pins = load_pins(write(tmp_path, "pins.yaml", PINS))
    with pytest.raises(ConfigError) as e:
        apply_lock(pins, {}, locked=True)
    assert "unresolved pins with --locked: b" in str(e.value) and "pins lock" in str(e.value)
    full = "abcdef1" + "0" * 33
    pins.lock_path.write_text(render_lock({"b": {"prefix": "abcdef1", "commit": full}}))
    lock = read_lock(pins.lock_path)
    locked = apply_lock(pins, lock, locked=True)
    assert locked.sources["b"].commit == full and locked.sources["b"].resolved
    # A lock entry that does not extend its prefix is refused.
    pins.lock_path.write_text(render_lock({"b": {"prefix": "abcdef1", "commit": "f" * 40}}))
    with pytest.raises(ConfigError, match="not a full SHA starting with"):
        read_lock(pins.lock_path)


RECIPE = """\
schema: 1
name: r
backends: [cpu]
components:
  - name: first
    source: a
    targets: [t]
  - name: second
    source: a
    defines:
      DEP: "${first.build_dir}"
      NUM: "${pin.a.short}"
    targets: [t2]
"""


def test_recipe_unknown_source(tmp_path):
    pins = load_pins(write(tmp_path, "pins.yaml", PINS))
    p = write(tmp_path, "recipes/r.yaml",
              RECIPE.replace("source: a\n    targets: [t]\n", "source: nope\n    targets: [t]\n"))
    with pytest.raises(ConfigError) as e:
        load_recipe(p, pins)
    assert "components[0].source" in str(e.value) and "unknown source 'nope'" in str(e.value)


def test_recipe_references_order_components(tmp_path):
    pins = load_pins(write(tmp_path, "pins.yaml", PINS))
    # Written in the wrong order on purpose: the reference decides.
    first = "  - name: first\n    source: a\n    targets: [t]\n"
    text = RECIPE.replace(first, "") + first
    recipe = load_recipe(write(tmp_path, "recipes/r.yaml", text), pins)
    assert [c.name for c in recipe.components] == ["first", "second"]


def test_reference_cycle_and_unknown_component(tmp_path):
    a = Component(name="x", source="s", defines=(("A", "${y.out}"),), targets=("t",))
    b = Component(name="y", source="s", defines=(("B", "${x.out}"),), targets=("t",))
    with pytest.raises(ConfigError, match="reference cycle (x -> y -> x|y -> x -> y)"):
        order_components([a, b], tmp_path / "r.yaml")
    c = Component(name="z", source="s", defines=(("C", "${nope.out}"),), targets=("t",))
    with pytest.raises(ConfigError, match="unknown component 'nope'"):
        order_components([c], tmp_path / "r.yaml")


def test_components_ready_together_keep_the_order_of_the_file(tmp_path):
    def comp(name: str, *refs: str) -> Component:
        return Component(name=name, source="s", defines=tuple((f"D{i}", f"${{{r}.out}}") for i, r in enumerate(refs)),
                         targets=("t",))

    # d needs c; a, b and c need nothing: each step takes the first ready one in the file.
    got = order_components([comp("d", "c"), comp("b"), comp("c"), comp("a", "b")], tmp_path / "r.yaml")
    assert [c.name for c in got] == ["b", "c", "d", "a"]


def test_bad_pin_reference(tmp_path):
    pins = load_pins(write(tmp_path, "pins.yaml", PINS))
    p = write(tmp_path, "recipes/r.yaml", RECIPE.replace("${pin.a.short}", "${pin.a.tag}"))
    with pytest.raises(ConfigError, match="bad reference"):
        load_recipe(p, pins)


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path):
    recipe = (REPO / "recipes" / "default.yaml").read_text()
    assert "      GGML_NATIVE: \"OFF\"\n" in recipe
    twice = recipe.replace("      GGML_NATIVE: \"OFF\"\n", "      GGML_NATIVE: \"OFF\"\n      GGML_NATIVE: \"ON\"\n", 1)
    first = twice.splitlines().index("      GGML_NATIVE: \"OFF\"") + 1
    p = write(tmp_path, "default.yaml", twice)
    with pytest.raises(ConfigError) as e:
        load_recipe(p, load_pins(REPO / "pins.yaml"))
    assert str(e.value) == (f"{p}: line {first + 1}, column 7: key 'GGML_NATIVE' is given twice (first on line {first})"
                            " (keep one of them)")
    pins = write(tmp_path, "pins.yaml", PINS + PINS.split("sources:\n", 1)[1])
    with pytest.raises(ConfigError, match="is given twice"):
        load_pins(pins)


def test_keys_merged_from_an_anchor_may_be_overridden(tmp_path):
    # The strix-halo recipe shares its HRX defines this way and overrides one of them.
    recipe = load_recipe(REPO / "recipes" / "strix-halo.yaml", load_pins(REPO / "pins.yaml"))
    loom = next(c for c in recipe.components if c.name == "loom-link")
    assert dict(loom.defines)["LIBHRX_BUILD"] == "OFF"


def test_every_key_error_names_its_line(tmp_path):
    p = write(tmp_path, "pins.yaml", PINS.replace("    abbreviated: true", "    abbreviated: true\n    comit: x"))
    line = p.read_text().splitlines().index("    comit: x") + 1
    with pytest.raises(ConfigError) as e:
        load_pins(p)
    assert str(e.value).startswith(f"{p}:{line}: sources.b.comit: unknown key")


# --------------------------------------------------------------------------- numbers


def _default_with(tmp_path: Path, section: str, line: str) -> Path:
    """The project's default recipe with ``key: value`` (YAML) set in ``section``."""
    doc = yaml.safe_load((REPO / "recipes" / "default.yaml").read_text())
    doc.setdefault(section, {}).update(yaml.safe_load(line))
    path = tmp_path / "recipes" / "default.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("section, line, key, allowed", [
    ("smoke", "health_timeout_s: .nan", "smoke.health_timeout_s", "above 0 up to 604800"),
    ("smoke", "request_base_s: .nan", "smoke.request_base_s", "above 0 up to 604800"),
    ("smoke", "stage_timeout_s: .inf", "smoke.stage_timeout_s", "above 0 up to 604800"),
    ("smoke", "health_timeout_s: -1", "smoke.health_timeout_s", "above 0"),
    ("smoke", "speed_repeats: 0", "smoke.speed_repeats", "a whole number of requests from 1 up to 1000"),
    ("smoke", "speed_tokens: 2.5", "smoke.speed_tokens", "a whole number of tokens from 1"),
    ("smoke", "ctx_size: true", "smoke.ctx_size", "a whole number of tokens"),
    ("smoke", "min_tok_s: 0", "smoke.min_tok_s", "tokens per second above 0"),
    ("smoke", "tolerance: 1.5", "smoke.tolerance", "fraction"),
    ("smoke", "threads: 0", "smoke.threads", "whole number of threads from 1"),
    ("smoke", "reference_tok_s: {CPU: .nan}", "smoke.reference_tok_s.CPU", "tokens per second above 0"),
    ("verification", "rounds: 4", "verification.rounds", "whole number of rounds from 5"),
    ("verification", "tolerance: .nan", "verification.tolerance", "fraction"),
    ("verification", "budget_s: 0", "verification.budget_s", "of seconds above 0"),
])
def test_every_number_of_a_recipe_is_finite_and_in_range(tmp_path, section, line, key, allowed):
    path = _default_with(tmp_path, section, line)
    with pytest.raises(ConfigError) as e:
        load_recipe(path, load_pins(REPO / "pins.yaml"))
    text = str(e.value)
    # file:LINE: key: the line of the key in the file, as every key error gives it
    assert re.match(rf"{re.escape(str(path))}:\d+: {re.escape(key)}: ", text) and allowed in text, text
    assert "\n" not in text


def test_numbers_in_range_load_as_given(tmp_path):
    path = _default_with(tmp_path, "verification", "budget_s: 120")
    recipe = load_recipe(path, load_pins(REPO / "pins.yaml"))
    assert recipe.verification.budget_s == 120 and recipe.smoke.speed_repeats == 3 and recipe.smoke.threads == 1
    assert recipe.smoke.ctx_size == 2048 and isinstance(recipe.smoke.ctx_size, int)
