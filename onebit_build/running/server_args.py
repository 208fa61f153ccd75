"""The command line and the environment of one llama-server, decided from its spec (pure):
what :mod:`server` starts."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from onebit_build.running.devices import CPU_DEVICE
from onebit_build.running.ports import HOST

LOAD_LOG_VERBOSITY = 4


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True, kw_only=True)
class ServerSpec:
    """How to run one llama-server."""

    binary: Path
    model: Path
    log: Path
    device: str = CPU_DEVICE
    host: str = HOST  # address to listen on (the checks always talk to it over loopback)
    ctx_size: int = 2048
    port: int | None = None  # preferred port; another free one is chosen when it is taken...
    fixed_port: bool = False  # ...unless the user chose it: then never another
    threads: int | None = None
    layers: str | None = None  # -ngl on a device other than the CPU (a count, or "all"); None: all
    alias: str | None = None  # the name /v1/models lists (--alias; one in extra_args wins); None: the path
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_key: str | None = field(default=None, repr=False)  # handed over in the environment, never on the command line
    health_timeout_s: float = 60.0
    stop_timeout_s: float = 5.0  # grace after the first SIGTERM

    def __post_init__(self) -> None:
        # A --host among the extra arguments is where llama-server really listens (it takes the
        # last one it is given): it becomes the spec's host, so that the key check, the address
        # printed and the one probed are the real ones, and the command line names one host.
        kept, hosts = take_option(self.extra_args, HOST_OPTION)
        if hosts:
            object.__setattr__(self, "host", hosts[-1])
            object.__setattr__(self, "extra_args", kept)


def device_args(device: str, layers: str | None = None) -> list[str]:
    """Arguments that put the model on ``device`` (``layers`` of it, all by default); "CPU"
    means no GPU offload."""
    if device == CPU_DEVICE:
        return ["--device", "none", "-ngl", "0"]
    return ["--device", device, "-ngl", layers or "all"]


# llama-server fits "unset arguments" to free device memory before it loads the model (on by
# default at the pin: common/arg.cpp's -fit, variable LLAMA_ARG_FIT; common/common.cpp runs
# a dry load of the model for it). Every server started here sets its device, its layers and
# its context, so the fit changes nothing and costs half a start (0.9 of 1.8 s for the smoke
# model here). Given as a variable, not as -fit: a fork from before the option ignores an
# unknown variable where it would refuse an unknown argument. The user's own LLAMA_ARG_FIT
# wins, and so does a -fit among the server's arguments (llama.cpp reads them after the
# variables).
FIT_VARIABLE = "LLAMA_ARG_FIT"


def server_env(spec: ServerSpec, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables a server gets on top of ``environ``: the spec's, the fit off unless the
    environment or the spec sets it, and the API keys (``spec.api_key`` and any ``--api-key``
    among the extra arguments) in llama-server's own variable. Pure."""
    env = dict(spec.env)
    if FIT_VARIABLE not in environ:
        env.setdefault(FIT_VARIABLE, "off")
    keys = [spec.api_key] if spec.api_key else []
    keys += split_secrets(spec.extra_args)[1]
    if keys:
        env[API_KEY_VARIABLE] = ",".join(keys)
    return env


# llama-server takes its keys from --api-key or from this variable (common/arg.cpp at the pin):
# a key on the command line is in every process listing and in the log's first line, so every
# key goes into the environment, which only the server's own user can read.
API_KEY_VARIABLE = "LLAMA_API_KEY"
API_KEY_OPTION = "--api-key"
KEY_FILE_VARIABLE = "LLAMA_ARG_API_KEY_FILE"
SERVE_KEY_VARIABLE = "ONEBIT_API_KEY"  # where 'serve' takes a key from without --api-key-file


# The address llama-server listens on: the tool always gives it on the command line, which
# llama.cpp reads after its variable LLAMA_ARG_HOST (common/arg.cpp at the pin), so the
# variable never decides it; a --host among the user's arguments does (the last one wins).
HOST_OPTION = "--host"


def take_option(args: tuple[str, ...], option: str) -> tuple[tuple[str, ...], list[str]]:
    """``args`` without their ``OPTION VALUE`` / ``OPTION=VALUE``, and those values in order. Pure."""
    kept: list[str] = []
    values: list[str] = []
    it = iter(args)
    for a in it:
        if a == option:
            values.append(next(it, ""))
        elif a.startswith(option + "="):
            values.append(a.split("=", 1)[1])
        else:
            kept.append(a)
    return tuple(kept), values


def split_secrets(args: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """``args`` without their ``--api-key KEY`` / ``--api-key=KEY``, and those keys. Pure."""
    kept, keys = take_option(args, API_KEY_OPTION)
    return kept, [k for k in keys if k]


def has_api_key(spec: ServerSpec, environ: Mapping[str, str]) -> bool:
    """Whether the server will ask its clients for a key (from the spec, its arguments or the
    environment it inherits). Pure."""
    if spec.api_key or split_secrets(spec.extra_args)[1] or environ.get(API_KEY_VARIABLE):
        return True
    return environ.get(KEY_FILE_VARIABLE) is not None or any(
        a == "--api-key-file" or a.startswith("--api-key-file=") for a in spec.extra_args)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only (llama-server takes a list of
    addresses separated by commas: each of them). Pure."""
    addresses = [h.strip() for h in host.split(",")]
    return all(_is_loopback_address(h) for h in addresses)


def _is_loopback_address(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def open_without_key(spec: ServerSpec, environ: Mapping[str, str]) -> str | None:
    """The warning for a server that listens beyond loopback with no API key; None when it
    does not. Pure."""
    if is_loopback(spec.host) or has_api_key(spec, environ):
        return None
    return (f"llama-server listens on {spec.host or 'every address'} without an API key: anyone who can reach this "
            f"machine can use it; give a key with --api-key-file FILE or ${SERVE_KEY_VARIABLE}, or listen on 127.0.0.1")


def server_argv(spec: ServerSpec, port: int) -> list[str]:
    argv = [
        str(spec.binary),
        "-m", str(spec.model),
        "--host", spec.host,
        "--port", str(port),
        "-np", "1",
        "-c", str(spec.ctx_size),
        "--no-webui",
        # libllama's INFO lines (the model load: where each layer went) are logged at the
        # trace level, 4, above the default 3 (common/log.cpp): the offload check reads them.
        "--log-verbosity", str(LOAD_LOG_VERBOSITY),
        *device_args(spec.device, spec.layers),
    ]
    argv += ["--alias", spec.alias] if spec.alias and not gives_alias(spec.extra_args) else []
    if spec.threads is not None:
        argv += ["-t", str(spec.threads)]
    argv += list(split_secrets(spec.extra_args)[0])
    return argv


def gives_alias(args: tuple[str, ...]) -> bool:  # the user's own arguments name the model already
    return any(a in ("-a", "--alias") or a.startswith("--alias=") for a in args)
