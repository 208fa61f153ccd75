"""``serve``: build if needed, then run llama-server in the foreground until Ctrl-C."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from onebit_build.commands import Command
from onebit_build.job.stage import Stage

if TYPE_CHECKING:
    from onebit_build.core.project import ProjectRoot
    from onebit_build.commands._options import Options
    from onebit_build.running.server_args import ServerSpec

COMMAND = Command(name="serve", help="build if needed, then run llama-server in the foreground (Ctrl-C stops it)",
                  rank=40, until=Stage.BUILD, git=True, takes_model=True)
MAX_KEY_FILE_BYTES = 64 << 10  # a key is one line; the file may hold comments


def arguments(p: argparse.ArgumentParser) -> None:
    from onebit_build.commands._oci import USE_HELP
    from onebit_build.commands.arguments import checked
    from onebit_build.running.ports import check_host, check_port

    p.add_argument("--host", type=checked(check_host), default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=checked(check_port), default=8080,
                   help="port to listen on, 1 to 65535 (default 8080; never another)")
    p.add_argument("--api-key-file", metavar="FILE",
                   help="clients must send the key in FILE (its first line; default: $ONEBIT_API_KEY); it reaches"
                   " llama-server in its environment, never on its command line or in a log")
    p.add_argument("--allow-unverified", action="store_true", help=USE_HELP)
    p.add_argument("server_args", nargs=argparse.REMAINDER, metavar="-- ARGS",
                   help="more llama-server arguments, after --")


@dataclass(frozen=True, kw_only=True)
class ServeFlags:
    host: str = "127.0.0.1"
    port: int = 8080
    extra: tuple[str, ...] = ()  # llama-server arguments after "--"
    api_key_file: Path | None = None  # the key itself is read when the server starts, and kept nowhere


def options(args: Mapping[str, Any]) -> ServeFlags:
    """``serve``'s options, with a ``--host`` or ``--port`` after ``--`` taken as its own (where
    llama-server would listen: the last one given), checked the same way."""
    from onebit_build.commands._options import existing
    from onebit_build.core.errors import ConfigError
    from onebit_build.core.safepath import FILE

    host, port = args.get("host") or "127.0.0.1", args.get("port") or 8080
    extra = tuple(args.get("server_args") or ())
    if extra and extra[0] == "--":
        extra = extra[1:]
    api_key_file = existing(args.get("api_key_file"), "--api-key-file", FILE)
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
    if any(a == "--port" or a.startswith("--port=") for a in extra):  # where llama-server would listen
        from onebit_build.running.ports import check_port
        from onebit_build.running.server_args import take_option

        extra, ports = take_option(extra, "--port")
        try:
            port = check_port(ports[-1])
        except ValueError as exc:
            raise ConfigError(f"-- --port: {exc}", hint="give one port from 1 to 65535, e.g. 8080") from None
    return ServeFlags(host=host, port=port, extra=extra, api_key_file=api_key_file)


def run(opts: Options, project: ProjectRoot, cmd: Command) -> int:
    """Build if needed (holding the workspace lock), then run llama-server in the foreground
    until Ctrl-C (without the lock: other runs may use the workspace meanwhile)."""
    import os

    from onebit_build.running.gguf import has_chat_template
    from onebit_build.running.ports import bind_error, bind_problem
    from onebit_build.running.server import serve_foreground

    problem = bind_problem(opts.own.host, opts.own.port)
    if problem is not None:  # before anything is built: the user's port is never swapped for another
        raise bind_error(opts.own.host, opts.own.port, problem)
    key = api_key(opts.own.api_key_file, os.environ)  # before anything is built, as the port
    spec = serve_spec(opts, project, key)
    return serve_foreground(spec, has_chat_template=has_chat_template(spec.model) is not False)


def serve_spec(opts: Options, project: ProjectRoot, key: str | None = None) -> ServerSpec:
    """What ``serve`` runs: the built server and the model, made ready under the workspace lock."""
    from onebit_build.checking.verdict import refuse_not_verified
    from onebit_build.spec.model_spec import served_name
    from onebit_build.job.build import server_of
    from onebit_build.job.job import Needs, open_job
    from onebit_build.job.run import run as run_job
    from onebit_build.job.smoke import resolve_model, with_runtime_env
    from onebit_build.running.server_args import ServerSpec

    with open_job(opts.settings, project, Needs(git=True), label=opts.label) as job:
        built = run_job(job, Stage.BUILD).built
        assert built is not None  # a job run up to the build has built
        refuse_not_verified(built.manifest, allow=opts.args.get("allow_unverified") is True, what="serve")
        model = resolve_model(job.recipe, job.settings, models_dir=job.workspace.models, log=job.log("model.log"),
                              lock=project.models_lock)
        log = job.log("server.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        return ServerSpec(binary=server_of(built.builds, job.recipe), model=model.path, log=log, host=opts.own.host,
                          port=opts.own.port, fixed_port=True, extra_args=opts.own.extra,
                          alias=served_name(job.recipe.model, sha256=model.sha256, file=model.path),
                          env=with_runtime_env(job.recipe, opts.toolchain_root).smoke.env, health_timeout_s=300.0,
                          api_key=key)


def api_key(key_file: Path | None, environ) -> str | None:
    """The key ``serve`` hands to llama-server: the first line of ``--api-key-file`` (blank
    lines and ``#`` comments skipped), else ``$ONEBIT_API_KEY``; None without either. No
    message ever holds the key itself."""
    from onebit_build.core.errors import ConfigError
    from onebit_build.core.safepath import read_named, warn_if_shared
    from onebit_build.running.server_args import SERVE_KEY_VARIABLE

    if key_file is None:
        return environ.get(SERVE_KEY_VARIABLE) or None
    hint = "give a file whose first line is the key (e.g. from: openssl rand -hex 32)"
    data = read_named(key_file, "--api-key-file", limit=MAX_KEY_FILE_BYTES, what="a key file", hint=hint)
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise ConfigError(f"--api-key-file {key_file}: not readable text", hint=hint) from None
    warn_if_shared(key_file, "--api-key-file")
    keys = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
    if not keys:
        raise ConfigError(f"--api-key-file {key_file}: holds no key", hint="write the key on its first line")
    return keys[0]
