"""The command table: every subcommand once, with its help, what it takes, what it needs and
how far its job runs. ``cli`` builds the parser from it and dispatches through it.

Each entry names the function that runs it as ``module:function``; the module is imported
only when that command runs (as west loads extension commands), so that ``--help``,
``--version``, ``recipes`` and ``completion`` do not import the build pipeline.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from onebit_build.job.stage import Stage


@dataclass(frozen=True, kw_only=True)
class Command:
    name: str
    help: str
    run: str  # "module:function" (in onebit_build.commands), called as function(opts, project, command)
    arguments: str | None = None  # the function of commands.arguments that adds its own options
    until: Stage | None = None  # a job: the last stage it runs
    skip: frozenset[Stage] = frozenset()  # a job: stages it leaves out
    dry_run: bool = False  # takes --dry-run: prints the plan of its job instead
    json: str | None = None  # takes --json: what it prints then
    git: bool = False  # fetches or patches sources
    writes_project: bool = False  # writes pins.lock or patches/ (a checkout only)
    action: str | None = None  # its one sub-action ('patches export', 'pins lock')
    takes_model: bool = False  # uses --model

    @property
    def builds(self) -> bool:
        """Its job runs the build stage (so it takes --fresh)."""
        return self.until is not None and self.until >= Stage.BUILD

    def runner(self) -> Callable[..., int]:
        # The command's module is imported here, when that command runs, and never with the table
        # itself: building the parser for --help or completion loads no command's module.
        module, _, function = self.run.partition(":")
        return getattr(importlib.import_module(f"onebit_build.commands.{module}"), function)


JOB = "jobs:job"
TABLE: tuple[Command, ...] = (
    Command(name="fetch", help="fetch every source of the recipe at its pinned commit", run=JOB, arguments="run_folder",
            until=Stage.FETCH, dry_run=True, git=True),
    Command(name="patch", help="fetch, then prepare patched source trees", run=JOB, arguments="run_folder",
            until=Stage.PATCH, dry_run=True, git=True),
    Command(name="build", help="fetch, patch and build; write build-manifest.json", run=JOB, arguments="run_folder",
            until=Stage.BUILD, dry_run=True, git=True),
    Command(name="smoke", help="start the built llama-server and check it (builds first if needed)", run=JOB,
            arguments="smoke", until=Stage.SMOKE, skip=frozenset({Stage.VERIFY}), dry_run=True, git=True,
            takes_model=True),
    Command(name="all", help="the whole job (the default): fetch, patch, build, verify, smoke, report", run=JOB,
            arguments="run_folder_junit", until=Stage.SMOKE, dry_run=True, git=True, takes_model=True),
    Command(name="verify", help="compare every output and kernel artifact of the build with the committed reference"
            " of its toolchain (builds first if needed)",
            run="jobs:verify", arguments="verify", until=Stage.BUILD, dry_run=True, git=True),
    Command(name="verify-run", help="compare this recipe's new build with a working build: kernel artifacts, answers,"
            " speed and provenance; VERIFIED (exit 0) or NOT VERIFIED (exit 11)", run="verify_run:verify_run",
            arguments="verify_run", until=Stage.BUILD, git=True, takes_model=True),
    Command(name="plan",
            help="print the full plan (sources, patches, configure commands, outputs, runtime); no network",
            run="info:plan", json="print the plan as JSON (schema 1)"),
    Command(name="recipes", help="list the recipes: name, backends, description", run="info:recipes",
            arguments="recipes", json="print the list as JSON"),
    Command(name="doctor", help="check this machine for what the recipe needs, each missing item with its fix",
            run="info:doctor", json="print the checks as JSON (schema 1)"),
    Command(name="serve", help="build if needed, then run llama-server in the foreground (Ctrl-C stops it)",
            run="use:serve", arguments="serve", until=Stage.BUILD, git=True, takes_model=True),
    Command(name="install",
            help="build if needed, then copy llama-server, its libraries and the manifest into a prefix",
            run="use:install", arguments="install", until=Stage.BUILD, git=True),
    Command(name="patches", help="patch series tools", run="tools:patches_export", arguments="patches", git=True,
            writes_project=True, action="export"),
    Command(name="pins", help="pin tools", run="tools:pins_lock", arguments="pins", git=True, writes_project=True,
            action="lock"),
    Command(name="bench", help="benchmark llama-server configs, builds or devices: interleaved, answer-checked, locked;"
            " table, JSON and plot", run="bench:bench", arguments="bench", takes_model=True),
    Command(name="builds", help="every build in the workspace: recipe, key, when, size, up to date or stale",
            run="life:builds", json="print the list as JSON (schema 1)"),
    Command(name="location", help="print the path of the recipe's latest llama-server (nothing is built)",
            run="life:location"),
    Command(name="gc", help="remove stale builds, old run folders and unused prepared trees (--dry-run lists them)",
            run="life:gc", arguments="gc"),
    Command(name="model", help="model tools", run="life:model_pull", arguments="model", action="pull",
            takes_model=False),
    Command(name="completion", help="print a shell completion script (bash, zsh or fish)", run="info:completion",
            arguments="completion"),
)
BY_NAME = {c.name: c for c in TABLE}
