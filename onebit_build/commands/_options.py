"""What the user asked for, as one frozen value built at the edge from the parsed arguments.

Nothing below the command line reads ``argparse`` results: the stages receive an
``Options`` (or the part of it they need). The rules (recipe choice, ``-D`` parsing) are
pure functions, tested without running anything.
"""

from __future__ import annotations

import argparse
import os
import shlex
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping
from onebit_build.building.cache.request import CacheRequest, request_from
from onebit_build.core.names import CMAKE_NAME, is_cmake_name
from onebit_build.core.errors import ConfigError
from onebit_build.core.safepath import FILE, FILE_OR_FOLDER, FOLDER, check_kind, resolved
from onebit_build.core.workspace import Workspace, check_folder, default_workspace, mirror_dirs_from

HRX_RECIPE = "strix-halo"
DEFAULT_RECIPE = "default"
DEFINE_RE = re.compile(rf"^(?:(?P<comp>[A-Za-z0-9_.-]+):)?(?P<name>{CMAKE_NAME.pattern})"
                       r"(?::[A-Z]+)?=(?P<value>.*)$", re.S)


@dataclass(frozen=True, kw_only=True)
class VerifyOptions:
    reference: Path | None = None
    write_reference: Path | None = None
    rebuild: bool = False


@dataclass(frozen=True, kw_only=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8080
    extra: tuple[str, ...] = ()  # llama-server arguments after "--"
    api_key_file: Path | None = None  # the key itself is read when the server starts, and kept nowhere


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    """``bench``: what to compare and how (defaults: running.bench.settings.DEFAULTS)."""

    configs: tuple[str, ...] = ()
    builds: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    rounds: int
    decode_tokens: int
    prefix_tokens: int
    tie_margin: float
    ctx_size: int
    expect: Path | None = None
    prompts: Path | None = None
    lock: Path | None = None
    wait_s: float = 0.0
    out: Path | None = None


@dataclass(frozen=True, kw_only=True)
class VerifyRunOptions:
    """``verify-run``: the working build to compare with, and how (None: the recipe's)."""

    working: Path
    adopt: bool = False
    rounds: int | None = None  # default: the recipe's verification.rounds
    tolerance: float | None = None  # default: the recipe's verification.tolerance
    budget_s: float | None = None  # --speed-budget; default: the recipe's verification.budget_s
    decode_tokens: int | None = None  # --decode-tokens; default: the bench's
    no_speed: bool = False  # --no-speed: no speed rounds, the speed part is not judged
    new_args: str = ""  # extra llama-server arguments for the new build's servers
    working_args: str = ""
    lock: Path | None = None
    wait_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Define:
    """A ``-D [COMPONENT:]NAME=VALUE`` override of a recipe's CMake define."""

    component: str | None
    name: str
    value: str

    def render(self) -> str:
        return f"{self.component + ':' if self.component else ''}{self.name}={self.value}"


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
    gc_dry_run: bool = False  # 'gc --dry-run': list what would go, remove nothing
    gc_tests: bool = False  # 'gc --test-workspaces': the test command's kept workspaces go too
    names: bool = False  # 'recipes --names'
    shell: str = "bash"  # 'completion SHELL'
    model: Path | None = None
    server: Path | None = None  # smoke: a llama-server built elsewhere
    toolchain_root: str | None = None
    defines: tuple[Define, ...] = ()
    sources: tuple[str, ...] = ()  # 'pins lock SOURCE...' / 'patches export SOURCE'
    prefix: Path | None = None  # 'install --prefix'
    verify: VerifyOptions = field(default_factory=VerifyOptions)
    serve: ServeOptions = field(default_factory=ServeOptions)
    bench: BenchOptions | None = None
    verify_run: VerifyRunOptions | None = None
    run_dir: Path | None = None  # --run-dir: this invocation's run folder (new or empty)
    junit: Path | None = None  # --junit: the checks as JUnit XML (smoke, verify-run)
    write_numerics: Path | None = None  # smoke --write-numerics: the CPU run as a numerical reference
    # --compiler-cache, --compiler-cache-url, --compiler-cache-dist
    compiler_cache: CacheRequest = field(default_factory=CacheRequest)
    signing_key: Path | None = None  # --signing-key: the PEM file (read when the build's evidence is signed)
    # Every parsed argument, read-only: a command module reads its own options from it (and
    # checks them there) rather than growing this class by a field.
    args: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def ws(self) -> Workspace:
        """The workspace these options name: the one place a Workspace is made from them."""
        return Workspace(root=self.workspace)

    @property
    def recipe_is_file(self) -> bool:
        return recipe_is_file(self.recipe)

    @property
    def label(self) -> str:
        """The command as run folders and lock holders name it (``pins-lock``)."""
        return f"{self.command}-{self.action}" if self.action else self.command



def recipe_is_file(text: str) -> bool:
    """``--recipe`` names a file (rather than a recipe of the project) when it looks like a path."""
    return text.endswith((".yaml", ".yml")) or os.sep in text


def recipe_choice(*, recipe: str | None, hrx: str | None) -> str:
    """The recipe from ``--recipe`` and ``--hrx``. Pure."""
    if hrx == "on":
        if recipe and recipe != HRX_RECIPE:
            raise ConfigError(f"--hrx on selects recipe {HRX_RECIPE!r}, but --recipe {recipe!r} was given",
                              hint="drop one of them")
        return HRX_RECIPE
    return recipe or DEFAULT_RECIPE


class DefineSyntaxError(ConfigError):
    """A ``-D`` that is not ``[COMPONENT:]NAME=VALUE``. Its hint is made from the recipe when
    the recipe can be read (``define_examples``), since only the recipe knows its components."""

    def __init__(self, text: str):
        super().__init__(f"-D {text!r}: expected NAME=VALUE or COMPONENT:NAME=VALUE",
                         hint="'onebit-build plan' lists each component's defines")
        self.text = text


def define_examples(recipe) -> tuple[str, ...]:
    """Overrides that are valid for ``recipe``, for an error's hint: a define of the component
    that builds llama-server, and one of each other component, named with it. Pure."""
    main = recipe.server_component
    found = []
    for comp in (main, *(c for c in recipe.components if c is not main)):
        if comp.defines:
            name, value = comp.defines[0]
            setting = f"{name}={value}" if comp is main else f"{comp.name}:{name}={value}"
            found.append(f"-D {shlex.quote(setting)}")
    return tuple(found)


def parse_define(text: str) -> Define:
    """``NAME=VALUE`` or ``COMPONENT:NAME=VALUE`` (a CMake type suffix ``NAME:BOOL=`` is accepted
    and dropped: the recipe's cache file sets strings). Pure."""
    m = DEFINE_RE.match(text)
    if not m:
        raise DefineSyntaxError(text)
    comp = m.group("comp")
    if comp is not None and comp.isupper():  # NAME:TYPE=VALUE was read as COMPONENT:NAME
        comp = None
        name = text.split(":", 1)[0]
    else:
        name = m.group("name")
    if not is_cmake_name(name):
        raise ConfigError(f"-D {name}=...: {name!r} is not a CMake variable name",
                          hint="use letters, digits and '_' only, not starting with a digit")
    return Define(component=comp, name=name, value=m.group("value"))


def _serve_options(host: str, port: int, extra: tuple[str, ...], *, api_key_file: Path | None) -> ServeOptions:
    """``serve``'s options, with a ``--host`` after ``--`` taken as its own ``--host`` (where
    llama-server would listen: the last one given), checked the same way."""
    if any(a == "--host" or a.startswith("--host=") for a in extra):
        from onebit_build.running.ports import check_host
        from onebit_build.running.server_args import HOST_OPTION, take_option

        extra, hosts = take_option(extra, HOST_OPTION)
        host = hosts[-1]
        if "," in host:
            raise ConfigError(f"-- {HOST_OPTION} {host}: serve listens on one address",
                              hint="give one address: 127.0.0.1, or 0.0.0.0 for every address")
        try:
            host = check_host(host)
        except ValueError as exc:
            raise ConfigError(f"-- {HOST_OPTION}: {exc}",
                              hint="give an address of this machine, e.g. 127.0.0.1") from None
    return ServeOptions(host=host, port=port, extra=extra, api_key_file=api_key_file)


def from_args(ns: argparse.Namespace) -> Options:
    """The one place where parsed arguments become options."""
    get = ns.__dict__.get
    command = get("command") or "all"
    action = get("patches_command") or get("pins_command") or get("model_command")
    sources = tuple(get("sources") or ()) + ((get("source"),) if get("source") else ())
    extra = tuple(get("server_args") or ())
    if extra and extra[0] == "--":
        extra = extra[1:]
    return Options(
        command=command, action=action,
        recipe=recipe_choice(recipe=get("recipe"), hrx=get("hrx")),
        root=get("root"),
        workspace=_workspace(get("workspace")),
        mirror_dirs=mirror_dirs_from([*(get("mirror_dir") or ()), *(get("mirror_dir_after") or ())]),
        offline=bool(get("offline")), locked=bool(get("locked")), jobs=get("jobs"), fresh=bool(get("fresh")),
        json=bool(get("json")),
        dry_run=bool(get("dry_run")) or command == "plan", gc_dry_run=bool(get("gc_dry_run")),
        gc_tests=bool(get("gc_tests")), names=bool(get("names")),
        shell=get("shell") or "bash",
        model=_given(get("model"), "--model", FILE), server=_given(get("server"), "--server", FILE),
        toolchain_root=get("toolchain_root"),
        defines=tuple(parse_define(d) for d in (*(get("defines") or ()), *(get("defines_after") or ()))),
        sources=sources, prefix=_path(get("prefix"), "--prefix"),
        verify=VerifyOptions(reference=_given(get("reference"), "--reference", FILE_OR_FOLDER),
                             write_reference=_file_path(get("write_reference"), "--write-reference"),
                             rebuild=bool(get("rebuild"))),
        serve=_serve_options(get("host") or "127.0.0.1", get("port") or 8080, extra,
                             api_key_file=_given(get("api_key_file"), "--api-key-file", FILE)),
        bench=_bench_options(get) if command == "bench" else None,
        verify_run=_verify_run_options(get) if command == "verify-run" else None,
        run_dir=_path(get("run_dir"), "--run-dir"), junit=_file_path(get("junit"), "--junit"),
        write_numerics=_file_path(get("write_numerics"), "--write-numerics"),
        compiler_cache=request_from(get("compiler_cache"), get("compiler_cache_url"), os.environ,
                                    dist=get("compiler_cache_dist")),
        signing_key=_given(get("signing_key"), "--signing-key", FILE),
        args=MappingProxyType(dict(vars(ns))),
    )


def _verify_run_options(get) -> VerifyRunOptions:
    return VerifyRunOptions(
        working=check_path_length("--working", Path(get("working")).expanduser()), adopt=bool(get("adopt")),
        rounds=get("rounds"), tolerance=get("tolerance"), budget_s=get("speed_budget"),
        decode_tokens=get("decode_tokens"), no_speed=bool(get("no_speed")),
        new_args=get("new_args") or "", working_args=get("working_args") or "",
        lock=_file_path(get("bench_lock"), "--lock"),
        wait_s=max(0.0, get("wait") or 0.0),
    )


def _bench_options(get) -> BenchOptions:
    return BenchOptions(
        configs=tuple(get("bench_configs") or ()), builds=tuple(get("bench_builds") or ()),
                        devices=tuple(get("bench_devices") or ()),
        rounds=get("rounds"), decode_tokens=get("decode_tokens"), prefix_tokens=get("prefix_tokens"),
        tie_margin=max(0.0, get("tie_margin")), ctx_size=get("ctx_size"),
        expect=_given(get("expect"), "--expect", FILE),
        prompts=_folder_path(get("prompts"), "--prompts"),
        lock=_file_path(get("bench_lock"), "--lock"), wait_s=max(0.0, get("wait") or 0.0),
        out=_path(get("out"), "--out"),
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


def _path(text: str | None, flag: str = "a path option") -> Path | None:
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


def _given(text: str | None, flag: str, want: str) -> Path | None:
    """A path option that names an existing file (or folder, as ``want`` says) to read."""
    path = _path(text, flag)
    return check_kind(path, flag, want) if path is not None else None


def _file_path(text: str | None, flag: str) -> Path | None:
    """A path option that names a file to write: missing, or a regular file."""
    path = _path(text, flag)
    return check_kind(path, flag, FILE, missing_ok=True) if path is not None else None


def _folder_path(text: str | None, flag: str) -> Path | None:
    """A path option that names an existing folder."""
    return _given(text, flag, FOLDER)
