"""What the hostile-input tests share: a real tiny CMake project in a real git repository,
with a mirror and a project folder, run through the CLI (tests/test_hostile*.py)."""

from __future__ import annotations

import json
import textwrap

import pytest

from _support import TINY_CMAKE, bare_mirror, make_repo, project_tree, run_cli, tiny_recipe


@pytest.fixture(name="tiny_project")
def tiny_project_fixture(tmp_path):
    """A real tiny CMake project in a real git repository, a mirror of it, and a project
    folder whose recipe builds it (the recipe's extra text comes from the test)."""
    def make(extra_recipe: dict[str, str] | None = None, files: dict[str, str] | None = None):
        src = tmp_path / "tiny-src"
        commit = make_repo(src, {**TINY_CMAKE, **(files or {})})
        mirrors = tmp_path / "mirrors"
        bare_mirror(src, mirrors, "tiny")
        pins = f"schema: 1\nsources:\n  tiny:\n    url: https://example.invalid/tiny.git\n    commit: {commit}\n"
        recipes = {"tiny": tiny_recipe(), **(extra_recipe or {})}
        root = project_tree(tmp_path / "proj", pins=pins, recipes=recipes)
        ws = tmp_path / "ws"

        extra = ("--workspace", str(ws), "--mirror-dir", str(mirrors))

        def cli(*args: str, **kw):
            return run_cli(root, *extra, *args, **kw)

        cli.root, cli.extra = root, extra
        return cli, ws
    return make


def recipe_with(name: str, *, component: str = "hello", outputs: str = "hello: hello") -> str:
    return textwrap.dedent(f"""\
        schema: 1
        name: {name}
        description: a tiny C program
        backends: [cpu]
        components:
          - name: {json.dumps(component)}
            source: tiny
            targets: [hello]
            outputs:
              {outputs}
        """)
