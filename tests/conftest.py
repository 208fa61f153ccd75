"""Shared fixtures. The real llama-server and the real model are built/fetched once per
test session through the tool itself (cached in the test workspace across runs)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def workspace_for_tests() -> Path:
    """Workspace for tests that need the real build and model; kept between runs so that
    only the first run pays for the build."""
    env = os.environ.get("ONEBIT_TEST_WORKSPACE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "onebit-build-test"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


def progress(config: pytest.Config):
    """A function that prints one line on the terminal at once, outside pytest's capture
    (the first run builds for minutes: the run shows what it is doing). In an xdist worker
    the line goes to the worker's standard error, which is the terminal's, named by worker."""
    capman = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")
    worker = os.environ.get("PYTEST_XDIST_WORKER")

    def say(line: str) -> None:
        if reporter is None and worker is None:
            return
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            if worker is None:
                reporter.write_line(f"  [test setup] {line}")
            else:
                sys.stderr.write(f"  [test setup {worker}] {line}\n")
                sys.stderr.flush()

    return say


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests on the shared test workspace run on one xdist worker, one after another, in
    file order (``--dist loadgroup``); the other tests spread over the workers."""
    for item in items:
        if item.get_closest_marker("shared_workspace") is not None:
            item.add_marker(pytest.mark.xdist_group("shared-workspace"))


@pytest.fixture(autouse=True)
def _shared_locks(request):
    """The locks of tests/_shared.py a test needs, held for the whole test (set up after the
    wider fixtures, so never held while one of them builds)."""
    from _shared import DEFAULT_BUILD, WORKSPACE

    mark = request.node.get_closest_marker("shared_workspace")
    with contextlib.ExitStack() as stack:
        if mark is not None:
            stack.enter_context(WORKSPACE.held(exclusive=True))
        if mark is not None and mark.kwargs.get("rebuilds_default"):
            stack.enter_context(DEFAULT_BUILD.held(exclusive=True))
        elif mark is not None or "llama_server" in request.fixturenames:
            stack.enter_context(DEFAULT_BUILD.held(exclusive=False))
        yield


@pytest.fixture(scope="session")
def llama_server(pytestconfig) -> Path:
    """Path of a real llama-server built from the default recipe."""
    env = os.environ.get("ONEBIT_TEST_LLAMA_SERVER")
    if env:
        return Path(env)
    from _support import build_default_server

    from _shared import once_per_run

    def build() -> str:
        say = progress(pytestconfig)
        say(f"building the default recipe in {workspace_for_tests()} (reused when up to date)")
        return str(build_default_server(workspace_for_tests(), say=say))

    return Path(once_per_run("default-server", build))


@pytest.fixture(scope="session")
def gemma_model() -> Path:
    """Path of the real Gemma 3 270M GGUF named by the default recipe (sha256-checked)."""
    env = os.environ.get("ONEBIT_TEST_MODEL")
    if env:
        return Path(env)
    from _shared import once_per_run
    from _support import default_model

    return Path(once_per_run("default-model", lambda: str(default_model(workspace_for_tests()))))
