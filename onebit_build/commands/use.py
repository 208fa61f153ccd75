"""Commands that use a build: ``install`` copies it into a prefix, ``serve`` runs it."""

from __future__ import annotations

import shutil
from pathlib import Path

from onebit_build.commands import Command
from onebit_build.core import ui
from onebit_build.building.elfdeps import build_tree_libraries, copy_libraries, outside_loads
from onebit_build.core.errors import BuildError, ConfigError, OnebitError
from onebit_build.core.project import ProjectRoot
from onebit_build.job.build import server_of
from onebit_build.job.model import Needs, open_job
from onebit_build.job.run import run
from onebit_build.job.smoke import resolve_model, with_runtime_env
from onebit_build.job.stage import Stage
from onebit_build.options import Options
from onebit_build.running.model import has_chat_template
from onebit_build.running.server import ServerSpec, serve_foreground


def install(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """Build if needed, then copy the relocatable ``bin/`` tree and the manifest into a prefix."""
    if opts.prefix is None:
        raise ConfigError("install needs --prefix DIR", hint="e.g. onebit-build install --prefix ~/.local/llama")
    with open_job(opts, project, Needs(git=True)) as job:
        built = run(job, Stage.BUILD).built
        assert built is not None  # a job run up to the build has built
        files = install_tree(built.builds, built.manifest, opts.prefix)
        ui.answer(f"installed {len(files)} file(s) into {opts.prefix}")
        ui.info(f"  run: {opts.prefix / 'bin' / 'llama-server'} -m MODEL.gguf")
        return 0


def install_tree(builds: list, manifest: Path, prefix: Path) -> list[Path]:
    """Copy every output file (symbolic links kept as links) into ``prefix/bin`` and the manifest
    into ``prefix/share/onebit-build``; each file lands under a temporary name and is renamed."""
    bin_dir = prefix / "bin"
    share = prefix / "share" / "onebit-build"
    for d in (bin_dir, share):
        d.mkdir(parents=True, exist_ok=True)
    done: list[Path] = []
    # A folder output (an assembled prefix) is carried by its files, listed as outputs of their own.
    sources = sorted({p for b in builds for o in b.outputs if not o.path.is_dir() for p in _output_files(o.path)})
    for src in sources:
        target = bin_dir / src.name
        if src.is_symlink():
            tmp = target.with_name(f".{target.name}.tmp")
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(src.readlink())
            tmp.replace(target)
        else:
            _copy(src, target)
        done.append(target)
    done += self_contained(bin_dir, [b.build_dir for b in builds])
    _copy(manifest, share / "build-manifest.json")
    done.append(share / "build-manifest.json")
    return done


def self_contained(bin_dir: Path, build_dirs: list[Path]) -> list[Path]:
    """Copy into ``bin_dir`` every library its binaries load from a build folder, then refuse a
    tree that would still load one from there (it would break once the build folders go)."""
    elves = [p for p in sorted(bin_dir.iterdir()) if p.is_file() and not p.is_symlink()]
    copied: list[Path] = []
    for root in build_dirs:
        copied += copy_libraries(build_tree_libraries(elves + copied, root), bin_dir)
    problems = [p for root in build_dirs for p in outside_loads(bin_dir, root)]
    if problems:
        raise BuildError(f"the installed tree {bin_dir} still loads from a build folder: {'; '.join(problems[:4])}",
                         hint="give the component CMAKE_BUILD_RPATH=$ORIGIN so that its binaries find their "
                              "libraries beside them")
    return copied


def _copy(src: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copy2(src, tmp)
    tmp.replace(target)


def _output_files(path: Path) -> list[Path]:
    """An output and, for a shared library, the links beside it that name it."""
    if not path.exists():
        raise OnebitError(f"build output {path} is missing", hint="run 'onebit-build build' again")
    return [path, *(p for p in path.parent.iterdir() if p.is_symlink() and p.resolve() == path.resolve())]


def serve(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """Build if needed (holding the workspace lock), then run llama-server in the foreground
    until Ctrl-C (without the lock: other runs may use the workspace meanwhile)."""
    spec = serve_spec(opts, project)
    return serve_foreground(spec, has_chat_template=has_chat_template(spec.model) is not False)


def serve_spec(opts: Options, project: ProjectRoot) -> ServerSpec:
    """What ``serve`` runs: the built server and the model, made ready under the workspace lock."""
    with open_job(opts, project, Needs(git=True)) as job:
        built = run(job, Stage.BUILD).built
        assert built is not None  # a job run up to the build has built
        model = resolve_model(job.recipe, opts, models_dir=job.workspace.models, log=job.log("model.log"))
        log = job.log("server.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        return ServerSpec(binary=server_of(built.builds, job.recipe), model=model.path, log=log, host=opts.serve.host,
                          port=opts.serve.port, extra_args=opts.serve.extra,
                          env=with_runtime_env(job.recipe, opts.toolchain_root).smoke.env, health_timeout_s=300.0)
