"""What a benchmark will do: its prompts, configs, builds and devices, the variants they
make, the interleaved order they run in, and the request each one gets.

A *variant* is one way to serve the model: a llama-server binary (a build), a device and
extra server arguments (a config). The first variant is the baseline. Everything here is
parsed and checked before the bench lock is taken or a server starts.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from onebit_build.core.errors import ConfigError
from onebit_build.core.fsutil import StateError, read_state
from onebit_build.core.names import is_label, label_part
from onebit_build.core.safepath import FILE_OR_FOLDER, check_kind, read_named
from onebit_build.spec.yamlnode import yaml_problem
from onebit_build.running import server as srvmod
from onebit_build.running.devices import CPU_DEVICE, missing_devices
from onebit_build.running.bench.judge import Expectation, Step
from onebit_build.running.bench.settings import ALL_DEVICES, BENCH_KIND, BENCH_SCHEMA, PROMPT_NAMES, RESERVED_ARGS
import yaml


@dataclass(frozen=True, kw_only=True)
class Prompt:
    name: str
    text: str
    source: str = ""  # the file it was read from


@dataclass(frozen=True, kw_only=True)
class Config:
    """Extra llama-server arguments under a name (``--config NAME='ARGS'``)."""

    name: str
    args: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Build:
    """A llama-server binary under a name (``--server``/``--build``)."""

    name: str
    server: Path


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One column of the benchmark: a build served on a device with a config's arguments."""

    name: str
    config: str
    build: str
    device: str
    server: Path
    args: tuple[str, ...]



def parse_config(text: str) -> Config:
    """``NAME=ARGS`` (ARGS split like a shell would; may be empty) into a Config."""
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep or not is_label(name):
        raise ConfigError(
            f"--config {text!r}: expected NAME='SERVER ARGS' with a simple name",
            hint="e.g. --config t1='-t 1' (names: letters, digits, . _ + -)",
        )
    try:
        args = tuple(shlex.split(rest))
    except ValueError as exc:
        raise ConfigError(f"--config {name}: cannot split {rest!r}: {exc}", hint="check the quoting") from None
    for a in args:
        flag = a.split("=", 1)[0]
        if flag in RESERVED_ARGS:
            raise ConfigError(
                f"--config {name}: {flag} is set by the bench for every server",
                hint="use the bench's --model/--device options instead; host, port and slots are fixed",
            )
    return Config(name=name, args=args)


def parse_configs(texts: Iterable[str]) -> tuple[Config, ...]:
    configs = tuple(parse_config(t) for t in texts)
    if not configs:
        return (Config(name="default"),)
    _unique([c.name for c in configs], "--config")
    return configs


def _unique(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ConfigError(f"{what}: the name {n!r} is used twice", hint="give every one a different name")
        seen.add(n)


def server_in(path: Path) -> Path:
    """The llama-server binary a ``--build``/``--server`` path names: the file itself, or
    ``bin/llama-server`` (or ``llama-server``) inside a build folder."""
    path = Path(path).expanduser()
    if path.is_dir():
        for cand in (path / "bin" / "llama-server", path / "llama-server"):
            if cand.is_file():
                return cand.resolve()
        raise ConfigError(f"no llama-server in {path} (looked in bin/ and the folder itself)",
                          hint="pass the build folder or the binary")
    if not path.exists():
        raise ConfigError(f"llama-server not found: {path}", hint="pass an existing binary or build folder")
    check_kind(path, "--server", FILE_OR_FOLDER)  # a FIFO or a device is named as what it is
    if not os.access(path, os.X_OK):
        raise ConfigError(f"{path} is not executable", hint="pass the llama-server binary")
    return path.resolve()


def parse_build(text: str) -> Build:
    """``[NAME=]PATH``; without a name the build is named after its folder."""
    name, sep, rest = text.partition("=")
    if sep and is_label(name) and rest:
        path = Path(rest)
    else:
        name, path = "", Path(text)
    server = server_in(path)
    if not name:
        folder = server.parent.parent if server.parent.name == "bin" else server.parent
        name = label_part(folder.name) or "server"
    return Build(name=name, server=server)


def parse_builds(texts: Iterable[str]) -> tuple[Build, ...]:
    builds = tuple(parse_build(t) for t in texts)
    _unique([b.name for b in builds], "--server/--build")
    return builds


def load_prompts(folder: Path, names: tuple[str, ...] = PROMPT_NAMES) -> tuple[Prompt, ...]:
    """The fixed prompt texts ``NAME.txt``; each file's final newline is not part of it."""
    out = []
    for name in names:
        path = Path(folder) / f"{name}.txt"
        data = read_named(path, "prompt file", limit=MAX_PROMPT_BYTES, what="a prompt",
                          hint="restore smoke/prompts/ or pass --prompts DIR")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"prompt file {path}: not UTF-8 text (byte {exc.start})",
                              hint="save it as UTF-8") from None
        if text.endswith("\n"):
            text = text[:-1]
        if not text.strip():
            raise ConfigError(f"prompt file {path} is empty", hint="write the prompt text into it")
        out.append(Prompt(name=name, text=text, source=path.name))
    return tuple(out)


def load_expectations(path: Path, prompts: tuple[str, ...]) -> tuple[Expectation, ...]:
    """Expected prefixes from a file: an earlier run's ``bench.json`` (its recorded
    expectations) or a YAML/JSON mapping ``prompt name: expected text``."""
    path = Path(path)
    data = read_named(path, "--expect", limit=MAX_EXPECT_BYTES, what="a file of expected prefixes",
                      hint="pass a bench.json or a YAML file of 'prompt: expected text' lines")
    try:
        raw = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--expect {path}: not UTF-8 text (byte {exc.start})", hint="save it as UTF-8") from None
    try:
        doc = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--expect {path}: not YAML/JSON ({yaml_problem(exc)})",
                          hint="write 'prompt: expected text' lines") from None
    if isinstance(doc, dict) and doc.get("kind") == BENCH_KIND:
        try:
            doc = read_state(path, BENCH_KIND, BENCH_SCHEMA)
        except StateError as exc:
            raise ConfigError(f"--expect {path}: {exc}", hint="use a bench.json of this version") from None
        recorded = doc.get("expectations") or {}
        out = []
        for key, value in recorded.items():
            if key in prompts and isinstance(value, dict) and isinstance(value.get("text"), str) and value["text"]:
                steps = tuple(Step(id=int(st["id"]), text=str(st.get("text", "")), runner_up=st.get("runner_up"),
                                   runner_up_text=str(st.get("runner_up_text", "")), margin=st.get("margin"))
                              for st in value.get("steps") or [])
                out.append(Expectation(prompt=key, text=value["text"], tokens=value.get("tokens"),
                                       source=f"given ({path.name}: {value.get('source', 'recorded')})", steps=steps))
        if not out:
            raise ConfigError(f"--expect {path}: that run recorded no expected prefixes",
                              hint="use a run whose baseline answered")
        return tuple(out)
    elif isinstance(doc, dict):
        mapping = doc
    else:
        raise ConfigError(f"--expect {path}: expected a mapping of prompt name to text", hint="e.g. short: ' 6, 7, 8'")
    out = []
    for key, value in mapping.items():
        if key not in prompts:
            raise ConfigError(f"--expect {path}: unknown prompt {key!r}", hint=f"use some of: {', '.join(prompts)}")
        if not isinstance(value, str) or not value:
            raise ConfigError(f"--expect {path}: {key}: expected a non-empty text", hint="quote the expected prefix")
        out.append(Expectation(prompt=key, text=value, tokens=None, source=f"given ({path.name})"))
    return tuple(out)


def make_variants(configs: tuple[Config, ...], builds: tuple[Build, ...],
                  devices: dict[str, tuple[str, ...]]) -> tuple[Variant, ...]:
    """Every build on each of its devices with every config, in that nesting order; the
    first is the baseline. Names carry only the parts that vary (``build/device/config``)."""
    if not configs or not builds:
        raise ValueError("make_variants: need at least one config and one build")
    combos = [(b, d, c) for b in builds for d in devices[b.name] for c in configs]
    if not combos:
        raise ConfigError("no device to benchmark on", hint="pass --device CPU (or a device --list-devices shows)")
    many_builds = len({b.name for b, _, _ in combos}) > 1
    many_devices = len({d for _, d, _ in combos}) > 1
    many_configs = len(configs) > 1 or not (many_builds or many_devices)
    out = []
    for b, d, c in combos:
        parts = [p for p, on in ((b.name, many_builds), (d, many_devices), (c.name, many_configs)) if on]
        out.append(Variant(name="/".join(parts), config=c.name, build=b.name, device=d, server=b.server, args=c.args))
    _unique([v.name for v in out], "variants")
    return tuple(out)


def pick_devices(requested: tuple[str, ...], listed: tuple[str, ...]) -> tuple[str, ...]:
    """The devices to use on one build: ``all`` means the CPU and every listed device."""
    if not requested:
        return (CPU_DEVICE,)
    out: list[str] = []
    for d in requested:
        names = (CPU_DEVICE, *listed) if d == ALL_DEVICES else (d,)
        for n in names:
            if n not in out:
                out.append(n)
    return tuple(out)


def resolve_devices(builds: tuple[Build, ...], requested: tuple[str, ...], *, env: tuple[tuple[str, str], ...],
                    log_dir: Path) -> dict[str, tuple[str, ...]]:
    """The devices each build is benchmarked on. ``--list-devices`` is asked only when a
    device other than the CPU is wanted; a wanted device a build does not offer is an error."""
    need_list = any(d != CPU_DEVICE for d in requested)
    out: dict[str, tuple[str, ...]] = {}
    for b in builds:
        listed: tuple[str, ...] = ()
        if need_list:
            listed = srvmod.list_devices(b.server, env=env, log=Path(log_dir) / f"list-devices-{b.name}.log")
        devices = pick_devices(requested, listed)
        missing = missing_devices(devices, listed)
        if missing:
            raise ConfigError(
                f"{b.name}: this llama-server does not offer {', '.join(missing)} (--list-devices shows: "
                f"{', '.join(listed) or 'none'}; the CPU is always there)",
                hint="pick devices it lists, or pass --device all",
            )
        out[b.name] = devices
    return out


# Every bench request generates exactly the tokens asked for (the end of text is ignored)
# and returns their ids.
REQUEST_FLAGS = {"ignore_eos": True, "return_tokens": True}
MAX_EXPECT_BYTES = 16 << 20  # a bench.json of many rounds is a few MiB at most
MAX_PROMPT_BYTES = 1 << 20


def completion_body(prompt: str, n_predict: int) -> dict[str, Any]:
    """The greedy /completion request of the bench (see :func:`server.completion_body`)."""
    return srvmod.completion_body(prompt, n_predict, **REQUEST_FLAGS)
