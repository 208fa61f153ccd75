"""The job: what one invocation works on, resolved once from its settings.

A :class:`Job` is the project, the workspace, the pins (with pins.lock), the recipe (with the
``-D`` overrides) and this run's folder. Every stage takes the job and returns a typed result;
nothing below the command table reads a command name. :func:`open_job` holds the workspace
lock and makes the run folder for the job's lifetime.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from onebit_build.core import ui
from onebit_build.spec.recipe import Recipe, find_recipe, load_recipe
from onebit_build.core.safepath import FILE, check_kind, resolved
from onebit_build.spec.interpolate import define_problem
from onebit_build.core.errors import ConfigError
from onebit_build.spec.pins import Pins, apply_lock, check_locked, load_pins, read_lock
from onebit_build.core.proc import which
from onebit_build.core.project import ProjectRoot
from onebit_build.core.workspace import Workspace, WorkspaceLock, check_usable, sweep_killed
from onebit_build.job.settings import Settings, recipe_is_file
from onebit_build.spec.defines import Define

if TYPE_CHECKING:
    from onebit_build.job.plan import Plan


@dataclass(frozen=True, kw_only=True)
class Job:
    """Everything a stage needs, resolved once: the settings, the project, the workspace, the
    pins and the recipe, and this run's folder."""

    settings: Settings
    project: ProjectRoot
    workspace: Workspace
    pins: Pins
    recipe: Recipe
    plan: Plan  # the recipe resolved for this machine, once (job/plan.py)
    run_dir: Path

    @property
    def overrides(self) -> tuple[str, ...]:
        """The ``-D`` overrides as given (the manifest records them)."""
        return tuple(d.render() for d in self.settings.defines)

    @property
    def references(self) -> Path:
        """The committed references of the job's recipe."""
        # Imported here: the quick commands load recipes through this module without the manifest.
        from onebit_build.checking.references import recipe_folder

        return recipe_folder(self.project.references, self.recipe.name)

    def log(self, name: str) -> Path:
        """A log file of this run (``fetch.log``, ``build-llama.log``, ...)."""
        return self.run_dir / name


# --------------------------------------------------------------------------- loading


def recipe_file(project: ProjectRoot, name_or_path: str) -> Path:
    """The recipe file ``--recipe`` names: a recipe of the project, or a file of the user's."""
    if recipe_is_file(name_or_path):
        return check_kind(resolved(name_or_path, "--recipe"), "--recipe", FILE)
    return find_recipe(project.recipes, name_or_path)


def load_pins_and_recipe(project: ProjectRoot, recipe: str, *, defines: tuple[Define, ...] = (),
                         locked: bool = False) -> tuple[Pins, Recipe]:
    """pins.yaml with pins.lock applied (``locked``: every pin must be resolved there), and the
    recipe ``recipe`` names with the ``-D`` overrides."""
    pins = load_locked_pins(project)
    loaded = with_defines(load_recipe(recipe_file(project, recipe), pins), defines, pins)
    if locked:
        check_locked(pins, loaded.sources_used(pins.sources))
    return pins, loaded


def load_locked_pins(project: ProjectRoot) -> Pins:
    """pins.yaml with pins.lock applied."""
    pins = load_pins(project.pins)
    return apply_lock(pins, read_lock(pins.lock_path), locked=False)


def with_defines(recipe: Recipe, defines: tuple[Define, ...], pins: Pins | None = None) -> Recipe:
    """The recipe with ``-D`` overrides: each replaces or adds a define of one component (the
    one that builds llama-server unless the override names another). With ``pins``, each
    value's references are checked as the recipe's own are at load. Pure."""
    if not defines:
        return recipe
    names = [c.name for c in recipe.components]
    comps = {c.name: c for c in recipe.components}
    for d in defines:
        target = d.component or recipe.server_component.name
        if target not in comps:
            raise ConfigError(f"-D {d.render()}: recipe {recipe.name} has no component {target!r}",
                              hint=f"use one of: {', '.join(names)}")
        problem = define_problem(d.name, d.value, pins, recipe.toolchain) if pins is not None else None
        if problem is not None:
            raise ConfigError(f"-D {d.name}=...: {problem[0]}", hint=problem[1])
        comp = comps[target]
        kept = tuple((k, v) for k, v in comp.defines if k != d.name)
        comps[target] = replace(comp, defines=(*kept, (d.name, d.value)))
    return replace(recipe, components=tuple(comps[n] for n in names))


def load_for(settings: Settings, project: ProjectRoot) -> tuple[Pins, Recipe]:
    """The pins and recipe ``settings`` ask for, with the overrides and ``--locked``."""
    return load_pins_and_recipe(project, settings.recipe, defines=settings.defines, locked=settings.locked)


# --------------------------------------------------------------------------- the run


@dataclass(frozen=True, kw_only=True)
class Needs:
    """What a command needs before it starts (its entry in the command table says)."""

    git: bool = False  # it fetches or patches sources
    writes_project: bool = False  # it writes pins.lock or patches/ (a checkout only)
    compiles: bool = False  # compiling is its point ('build', 'verify --rebuild'): a compiler must be there


@contextmanager
def open_job(settings: Settings, project: ProjectRoot, needs: Needs, *, label: str,
             loaded: tuple[Pins, Recipe] | None = None) -> Iterator[Job]:
    """The job ``settings`` ask for, holding the workspace lock, in a new run folder (removed
    again when the run wrote nothing into it). ``label``: the command as the run folder and the
    lock's holder name it (``pins-lock``); ``loaded``: pins and recipe already loaded."""
    if needs.git:
        which("git")
    if needs.writes_project and project.data_from != "checkout":
        raise ConfigError(f"'{label.replace('-', ' ', 1)}' writes into the project's files, but they come from the"
                          f" installed package ({project.path})",
                          hint="run it inside a checkout of onebit-build, or pass --root DIR")
    pins, recipe = loaded or load_for(settings, project)
    if needs.compiles:
        check_compiler(recipe, settings.defines)
    ws = Workspace(root=settings.workspace)
    check_usable(ws.root)
    # The planner (CMake's tools, the compiler cache) is imported by the commands that open a
    # job, here: the quick commands load recipes through this module without it.
    from onebit_build.job.plan import plan_of

    with WorkspaceLock(ws.lock_file, f"onebit-build {label}"):
        sweep_left_behind(ws)
        run_dir = (given_run_dir(settings.run_dir) if settings.run_dir
                   else ws.new_run_dir(Path(settings.recipe).stem, label))
        ui.detail(f"workspace {ws.root}; logs in {run_dir}; project data {project.describe()}")
        try:
            yield Job(settings=settings, project=project, workspace=ws, pins=pins, recipe=recipe,
                      plan=plan_of(settings, project, pins, recipe, ws), run_dir=run_dir)
        finally:
            try:
                run_dir.rmdir()  # a run that stopped before writing anything leaves no folder
            except OSError:
                pass


def sweep_left_behind(ws: Workspace) -> None:
    """What killed runs left in the workspace goes (the caller holds its lock), named."""
    for gone in sweep_killed(ws):
        ui.info(f"  removed {gone.name}, left behind by a run that was killed")


COMPILER_DEFINES = ("CMAKE_C_COMPILER", "CMAKE_CXX_COMPILER")


def check_compiler(recipe: Recipe, defines: tuple[Define, ...]) -> None:
    """A command that compiles stops here without a C/C++ compiler: before the lock, a run
    folder or a fetch (exit 7). A recipe or -D that names its own compiler is checked when
    that component is built."""
    named = [k for c in recipe.components for k, _ in c.defines] + [d.name for d in defines]
    if any(k in COMPILER_DEFINES for k in named):
        return
    # The builder (CMake, scikit-build-core) is imported by the commands that compile, here:
    # 'recipes' and the other quick commands load recipes through this module without it.
    from onebit_build.building.compilers import missing_compiler

    problem = missing_compiler((), os.environ)
    if problem is not None:
        raise problem


def given_run_dir(path: Path) -> Path:
    """``--run-dir DIR``: a new or empty folder (a run never writes into an older run's folder,
    so that what a workflow uploads from it is this run's)."""
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ConfigError(f"--run-dir {path} already exists and is not an empty folder",
                          hint="give a folder that does not exist yet: a run never reuses an older run's folder")
    path.mkdir(parents=True, exist_ok=True)
    return path
