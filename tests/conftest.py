"""Shared fixtures. The real llama-server and the real model are built/fetched once per
test session through the tool itself (cached in the test workspace across runs)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

if os.environ.get("PYTEST_XDIST_WORKER"):
    # xdist's workers get COLUMNS=80 and LINES=24, and the CLI cuts its lines to COLUMNS:
    # the commands the tests run must see what a plain run gives them.
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)


def workspace_for_tests() -> Path:
    """Workspace for tests that need the real build and model; kept between runs so that
    only the first run pays for the build."""
    from onebit_build.core.workspace import shared_test_workspace

    return shared_test_workspace()  # the tool knows it too: 'gc' lists it


def vulkan_workspace_for_tests() -> Path:
    """The vulkan recipe's test workspace, beside the default one: its tests run apart from
    the default workspace's, on another worker."""
    ws = workspace_for_tests()
    return ws.with_name(f"{ws.name}-vulkan")


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


# Fixtures that build llama.cpp or fetch the real model: a test that uses one (directly or
# through another fixture) is slow, so that -m 'not slow and not benchmark' builds nothing.
REAL_BUILD_FIXTURES = {"llama_server", "gemma_model", "default_build", "second_build", "vulkan_build"}
# Test modules whose tests configure and compile projects (tiny CMake projects, the HRX
# stand-ins, the compiler and shader caches) or install the tool: each gets the marker
# 'builds', so that -m 'not slow and not builds and not benchmark' is the quick subset.
BUILDING_MODULES = {"test_build", "test_compiler_cache", "test_compiler_cache_builds",
                    "test_compiler_cache_tool", "test_cubin", "test_dist_compile", "test_downloads",
                    "test_elfdeps", "test_fresh", "test_hostile", "test_hostile_install", "test_hrx0",
                    "test_hrx_requirements", "test_hrx_standins", "test_install", "test_leftovers", "test_life",
                    "test_oci_tiny",
                    "test_pins_bump", "test_poisoned_cache", "test_provenance", "test_rebuild", "test_reliability",
                    "test_sbom", "test_sdist_mirror", "test_shader_cache", "test_shader_remote", "test_signing_keys",
                    "test_verify"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups, and before -m deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests on the shared test workspace run on one xdist worker, one after another, in
    file order (``--dist loadgroup``); the other tests spread over the workers. The shared
    ones, the longest chain, come first, so that one worker starts on them at once while the
    others take the rest. A test on a real build or the real model is marked slow."""
    for item in items:
        if REAL_BUILD_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if item.module is not None and item.module.__name__ in BUILDING_MODULES:
            item.add_marker(pytest.mark.builds)
    shared = [item for item in items if item.get_closest_marker("shared_workspace") is not None]
    for item in shared:
        name = item.get_closest_marker("shared_workspace").kwargs.get("workspace", "default")
        item.add_marker(pytest.mark.xdist_group(f"shared-workspace-{name}"))
    if shared and os.environ.get("PYTEST_XDIST_WORKER") is not None:
        ids = {id(item) for item in shared}
        items[:] = shared + [item for item in items if id(item) not in ids]


@pytest.fixture(autouse=True)
def _shared_locks(request):
    """The locks of tests/_shared.py a test needs, held for the whole test (set up after the
    wider fixtures, so never held while one of them builds)."""
    from _shared import workspace_lock

    mark = request.node.get_closest_marker("shared_workspace")
    name = mark.kwargs.get("workspace", "default") if mark is not None else None
    with contextlib.ExitStack() as stack:
        if name is not None:
            stack.enter_context(workspace_lock(name).held(exclusive=True))
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
