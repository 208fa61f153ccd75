"""What the user asked for, as one frozen value built at the edge from the parsed arguments.

Nothing below the command line reads ``argparse`` results or these options: the job and the
stages read :class:`~onebit_build.job.settings.Settings` (``Options.settings``) and the plan.
``Options`` holds the global options; a command's own options are read from ``args`` by the
command's module, and a module whose options must be checked before any work defines
``options(args)``, which :func:`from_args` calls (its value is ``Options.own``). The rules
(recipe choice, path checks) are pure functions, tested without running anything.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from onebit_build.building.cache.request import CacheRequest, request_from
from onebit_build.core.errors import ConfigError
from onebit_build.core.safepath import FILE, FOLDER, check_kind, resolved
from onebit_build.core.workspace import Workspace, check_folder, default_workspace, mirror_dirs_from
from onebit_build.job.settings import Settings, recipe_is_file
from onebit_build.spec.defines import Define, parse_define

HRX_RECIPE = "strix-halo"
DEFAULT_RECIPE = "default"


@dataclass(frozen=True, kw_only=True)
class Options:
    command: str = "all"
    action: str | None = None  # "export" for 'patches', "lock" for 'pins'
    recipe: str = DEFAULT_RECIPE  # a recipe name, or a path to a recipe file
    root: str | None = None
    workspace: Path
    mirror_dirs: tuple[Path, ...] = ()
    offline: bool = False
    locked: bool = False
    fresh: bool = False  # --fresh: configure every component from an empty build folder
    jobs: int | None = None
    json: bool = False
    dry_run: bool = False
    model: Path | None = None
    server: Path | None = None  # smoke: a llama-server built elsewhere
    toolchain_root: str | None = None
    defines: tuple[Define, ...] = ()
    run_dir: Path | None = None  # --run-dir: this invocation's run folder (new or empty)
    junit: Path | None = None  # --junit: the checks as JUnit XML (smoke, all, verify-run)
    write_numerics: Path | None = None  # smoke --write-numerics: the CPU run as a numerical reference
    # --compiler-cache, --compiler-cache-url, --compiler-cache-dist
    compiler_cache: CacheRequest = field(default_factory=CacheRequest)
    signing_key: Path | None = None  # --signing-key: the PEM file (read when the build's evidence is signed)
    # Every parsed argument, read-only: a command module reads its own options from it (and
    # checks them there) rather than growing this class by a field.
    args: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    own: Any = None  # what the command module's options(args) made of them, checked (None: it has none)

    @property
    def ws(self) -> Workspace:
        """The workspace these options name: the one place a Workspace is made from them."""
        return Workspace(root=self.workspace)

    @property
    def settings(self) -> Settings:
        """The settings a job runs with: the one place they are taken from the options. Pure."""
        return Settings(recipe=self.recipe, defines=self.defines, mirror_dirs=self.mirror_dirs, offline=self.offline,
                        locked=self.locked, fresh=self.fresh, jobs=self.jobs, toolchain_root=self.toolchain_root,
                        compiler_cache=self.compiler_cache, model=self.model, junit=self.junit,
                        write_numerics=self.write_numerics, signing_key=self.signing_key,
                        workspace=self.workspace, run_dir=self.run_dir)

    @property
    def recipe_is_file(self) -> bool:
        return recipe_is_file(self.recipe)

    @property
    def label(self) -> str:
        """The command as run folders and lock holders name it (``pins-lock``)."""
        return f"{self.command}-{self.action}" if self.action else self.command


def recipe_choice(*, recipe: str | None, hrx: str | None) -> str:
    """The recipe from ``--recipe`` and ``--hrx``. Pure."""
    if hrx == "on":
        if recipe and recipe != HRX_RECIPE:
            raise ConfigError(f"--hrx on selects recipe {HRX_RECIPE!r}, but --recipe {recipe!r} was given",
                              hint="drop one of them")
        return HRX_RECIPE
    return recipe or DEFAULT_RECIPE


def own_options(command: str, args: Mapping[str, Any]) -> Any:
    """The command's own options, checked by its module's ``options(args)`` (None without one)."""
    from onebit_build.commands import by_name

    reader = getattr(by_name(command).module, "options", None)
    return reader(args) if reader is not None else None


def from_args(ns: argparse.Namespace) -> Options:
    """The one place where parsed arguments become options."""
    get = ns.__dict__.get
    command = get("command") or "all"
    action = get("patches_command") or get("pins_command") or get("model_command")
    args = MappingProxyType(dict(vars(ns)))
    return Options(
        command=command, action=action,
        recipe=recipe_choice(recipe=get("recipe"), hrx=get("hrx")),
        root=get("root"),
        workspace=_workspace(get("workspace")),
        mirror_dirs=mirror_dirs_from([*(get("mirror_dir") or ()), *(get("mirror_dir_after") or ())]),
        offline=bool(get("offline")), locked=bool(get("locked")), jobs=get("jobs"), fresh=bool(get("fresh")),
        json=bool(get("json")),
        dry_run=bool(get("dry_run")) or command == "plan",
        model=existing(get("model"), "--model", FILE), server=existing(get("server"), "--server", FILE),
        toolchain_root=get("toolchain_root"),
        defines=tuple(parse_define(d) for d in (*(get("defines") or ()), *(get("defines_after") or ()))),
        own=own_options(command, args),
        run_dir=checked_path(get("run_dir"), "--run-dir"), junit=file_to_write(get("junit"), "--junit"),
        write_numerics=file_to_write(get("write_numerics"), "--write-numerics"),
        compiler_cache=request_from(get("compiler_cache"), get("compiler_cache_url"), os.environ,
                                    dist=get("compiler_cache_dist")),
        signing_key=existing(get("signing_key"), "--signing-key", FILE),
        args=args,
    )


# Linux's limits: a file name of at most NAME_MAX bytes, a path of at most PATH_MAX.
NAME_MAX = 255
PATH_MAX = 4096
# What the workspace adds below itself (sources, build trees, CMake's own folders): a
# workspace path longer than PATH_MAX less this fails deep inside a build.
WORKSPACE_ROOM = 1024


def check_path_length(flag: str, path: Path, *, room: int = 0) -> Path:
    """Refuse a path the file system cannot hold, naming the part that is too long. Pure."""
    for name in path.parts:
        size = len(os.fsencode(name))
        if size > NAME_MAX:
            raise ConfigError(f"{flag}: the name {name[:24]!r}... is {size} bytes long;"
                              f" a file name holds at most {NAME_MAX}",
                              hint=f"give {flag} a shorter name")
    size = len(os.fsencode(str(path)))
    if size + room > PATH_MAX:
        more = f", and the workspace needs about {room} more below it" if room else ""
        raise ConfigError(f"{flag}: the path is {size} bytes long; a path holds at most {PATH_MAX}{more}",
                          hint=f"give {flag} a shorter path")
    return path


def checked_path(text: str | None, flag: str = "a path option") -> Path | None:
    return check_path_length(flag, resolved(text, flag)) if text else None


def _workspace(given: str | None) -> Path:
    """--workspace, else $ONEBIT_WORKSPACE, else the default: resolved, its length checked, not
    a file, and an error naming where it came from."""
    origin = "--workspace" if given else ("$ONEBIT_WORKSPACE" if os.environ.get("ONEBIT_WORKSPACE")
                                          else "the default workspace")
    return check_folder(check_path_length(origin, resolved(given or default_workspace(), origin), room=WORKSPACE_ROOM))


# Every path option is checked here, before any work, by what it must name (safepath.check_kind):
# a file or folder to read must be one (a FIFO, a device, a folder where a file goes is named as
# what it is); a file to write may be missing, but then its folder must be there.


def existing(text: str | None, flag: str, want: str) -> Path | None:
    """A path option that names an existing file (or folder, as ``want`` says) to read."""
    path = checked_path(text, flag)
    return check_kind(path, flag, want) if path is not None else None


def file_to_write(text: str | None, flag: str) -> Path | None:
    """A path option that names a file to write: missing, or a regular file."""
    path = checked_path(text, flag)
    return check_kind(path, flag, FILE, missing_ok=True) if path is not None else None


def existing_folder(text: str | None, flag: str) -> Path | None:
    """A path option that names an existing folder."""
    return existing(text, flag, FOLDER)
