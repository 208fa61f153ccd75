"""Shared fixtures. The real llama-server and the real model are built/fetched once per
test session through the tool itself (cached in the test workspace across runs)."""

from __future__ import annotations

import contextlib
import os
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
    (the first run builds for minutes: the run shows what it is doing)."""
    capman = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")

    def say(line: str) -> None:
        if reporter is None:
            return
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            reporter.write_line(f"  [test setup] {line}")

    return say


@pytest.fixture(scope="session")
def llama_server(pytestconfig) -> Path:
    """Path of a real llama-server built from the default recipe."""
    env = os.environ.get("ONEBIT_TEST_LLAMA_SERVER")
    if env:
        return Path(env)
    from _support import build_default_server

    say = progress(pytestconfig)
    say(f"building the default recipe in {workspace_for_tests()} (reused when up to date)")
    return build_default_server(workspace_for_tests(), say=say)


@pytest.fixture(scope="session")
def gemma_model() -> Path:
    """Path of the real Gemma 3 270M GGUF named by the default recipe (sha256-checked)."""
    env = os.environ.get("ONEBIT_TEST_MODEL")
    if env:
        return Path(env)
    from _support import default_model

    return default_model(workspace_for_tests())
