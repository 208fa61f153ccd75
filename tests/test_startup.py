"""The quick commands start quickly: --help, --version, recipes and completion import
neither the build pipeline nor the libraries only other commands need.

Checked by what a real run of the tool imported (a timing would depend on the machine's
load); the modules named here are the ones that took most of the start-up before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NEVER = ("rich", "requests", "scikit_build_core", "pypi_simple", "psutil", "onebit_build.building.builder",
         "onebit_build.sources.fetch", "onebit_build.job.plan", "onebit_build.doctor",
         "onebit_build.running.server", "onebit_build.building.cache.compiler")
# What the quick commands need beyond that, by command: parsing the arguments needs none of it.
NOT_FOR_HELP = ("yaml", "onebit_build.commands._options", "onebit_build.spec.recipe", "shtab")
# The recipe table and the completion script, once kept in the user cache, need neither YAML
# nor the recipe model (nor shtab): only a first run, or one after a change, makes them.
NOT_WHEN_KEPT = ("yaml", "packaging", "onebit_build.spec.recipe", "onebit_build.spec.yamlnode",
                 "onebit_build.spec.pins", "onebit_build.spec.model_spec", "onebit_build.job.job",
                 "onebit_build.job.build", "shtab")

PROBE = """
import json, sys
from onebit_build import cli
try:
    code = cli.main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def imported(*args: str, cache: Path | None = None) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)} | ({"XDG_CACHE_HOME": str(cache)} if cache else {})
    r = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=REPO, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip(), f"{args} printed nothing"
    return set(json.loads(r.stderr.strip().splitlines()[-1]))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return [n for n in names if n in modules]


@pytest.mark.parametrize("args", [("--help",), ("--version",), ("recipes",), ("completion", "bash")],
                         ids=lambda a: " ".join(a))
def test_quick_commands_leave_the_pipeline_unimported(args):
    modules = imported(*args)
    assert loaded(modules, NEVER) == [], f"'onebit-build {' '.join(args)}' imported what it does not use"
    if args == ("--help",):
        assert loaded(modules, NOT_FOR_HELP) == [], "--help imported more than the command table and argparse"


@pytest.mark.parametrize("args", [("recipes",), ("recipes", "--json"), ("completion", "bash"), ("completion", "zsh"),
                                  ("completion", "fish")], ids=lambda a: " ".join(a))
def test_kept_answers_need_neither_yaml_nor_the_recipe_model(args, tmp_path):
    first = imported(*args, cache=tmp_path)  # an empty cache: made afresh, as before
    assert loaded(first, NOT_WHEN_KEPT) != [], "the first run did not make the answer: this check would see nothing"
    again = imported(*args, cache=tmp_path)
    assert loaded(again, NOT_WHEN_KEPT) == [], f"'onebit-build {' '.join(args)}' remade what the cache holds"


def test_a_command_that_prints_still_gets_its_console():
    """rich is imported on the first line printed through ui, so output still works."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = "from onebit_build.core import ui; import sys; ui.warn('careful'); print('rich' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "True" and "warning: careful" in r.stderr, r.stderr


ARGVS = [[], ["--help"], ["recipes"], ["recipes", "--json"], ["--recipe", "build", "recipes", "--names"],
         ["--recipe", "vulkan", "build", "-j", "3", "-D", "X=1"], ["-D", "X=1", "plan", "--json", "-D", "Y=2"],
         ["serve", "--port", "9000", "--", "--threads", "2"], ["completion", "zsh"], ["completion", "tcsh"],
         ["bench", "--rounds", "0"], ["build", "--no-such-flag"], ["no-such-command"], ["gc", "--dry-run"],
         ["--version"], ["-v", "all", "--help"]]


def parsed(parser, argv: list[str]) -> tuple:
    """What ``parser`` makes of ``argv``: the namespace, or the exit code with what it printed."""
    import argparse
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            ns: argparse.Namespace | None = parser.parse_args(argv)
        except SystemExit as exc:
            return ("exit", exc.code, out.getvalue(), err.getvalue())
    return ("parsed", vars(ns))


@pytest.mark.parametrize("argv", ARGVS + [[c] for c in ("fetch", "verify-run", "patches", "pins", "model", "install")],
                         ids=lambda a: " ".join(a) or "(none)")
def test_the_parser_built_for_an_argv_parses_it_as_the_whole_parser_does(argv):
    from onebit_build.commands.parser import make_parser

    assert parsed(make_parser(argv), argv) == parsed(make_parser(), argv)


def test_the_parser_built_for_an_argv_leaves_the_other_commands_bare():
    """So that the check above compares two different parsers (and start-up saves the work)."""
    from onebit_build.commands.parser import make_parser

    def sizes(parser) -> dict[str, int]:
        (sub,) = [a for a in parser._actions if a.dest == "command"]
        return {name: len(p._actions) for name, p in sub.choices.items()}

    lean, whole = sizes(make_parser(["recipes"])), sizes(make_parser())
    assert lean["recipes"] == whole["recipes"] and lean.keys() == whole.keys()
    assert [n for n in lean if n != "recipes" and lean[n] >= whole[n]] == []
