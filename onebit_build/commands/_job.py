"""What the job commands (fetch, patch, build, smoke, all, verify) share: a job run up to a stage."""

from __future__ import annotations

from pathlib import Path

from onebit_build.commands import Command
from onebit_build.core import ui
from onebit_build.core.project import ProjectRoot
from onebit_build.core.errors import NotAvailableError
from onebit_build.job.build import Built, server_of
from onebit_build.job.job import Job, Needs, open_job
from onebit_build.job.run import run
from onebit_build.job.stage import Stage
from onebit_build.commands._options import Options


def needs(cmd: Command, opts: Options) -> Needs:
    """Git is needed to fetch or patch; smoking a binary built elsewhere needs none."""
    compiles = cmd.name == "build" or (cmd.name == "verify" and opts.args.get("rebuild") is True)
    return Needs(git=cmd.git and opts.server is None, writes_project=cmd.writes_project, compiles=compiles)


def job(opts: Options, project: ProjectRoot, cmd: Command, binary_cache=None) -> int:
    """The job up to the command's last stage; ``binary_cache``: the command's --binary-cache
    (job.pull.BinaryCacheRequest)."""
    assert cmd.until is not None  # every job command of the table names its last stage
    with open_job(opts.settings, project, needs(cmd, opts), label=opts.label) as j:
        done = run(j, cmd.until, skip=cmd.skip, server=opts.server, binary_cache=binary_cache,
                   allow_unverified=opts.args.get("allow_unverified") is True)
        if cmd.until == Stage.BUILD and done.built is not None:
            ui.answer(str(built_answer(j, done.built)))
        return done.exit_code


def built_answer(job: Job, built: Built) -> Path:
    """What ``build`` answers: the llama-server it built (the manifest for a recipe without one)."""
    try:
        return server_of(built.builds, job.recipe)
    except NotAvailableError:
        return built.manifest

