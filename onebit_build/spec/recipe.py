"""Recipes: frozen dataclasses loaded from YAML and validated once, at load (the pins are in
:mod:`onebit_build.spec.pins`; their names are also importable from here).

Every error names the file, the key path and the fix. Unknown keys are errors."""

from __future__ import annotations

import graphlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from onebit_build.core.errors import ConfigError
from onebit_build.spec.pins import Pins
from onebit_build.spec.assemble_spec import AssembleSpec, load_assemble
from onebit_build.spec.model_spec import ModelSpec, load_model
from onebit_build.spec.downloads_spec import DownloadSpec, load_downloads
from onebit_build.spec.requires_spec import RequiresSpec, load_requires
from onebit_build.spec.jit_cache_spec import JitCacheSpec, load_jit_cache
from onebit_build.spec.numerics_spec import NumericsSpec, load_numerics
from onebit_build.core.safepath import resolved
from onebit_build.spec.toolchain_spec import ToolchainSpec, load_toolchain
from onebit_build.spec.yamlnode import Node, Range, check_schema, load_yaml
from onebit_build.core.names import is_cmake_name, is_component_name, is_file_name, relative_inside
from onebit_build.spec.interpolate import (INTERPOLATION_RE, RESERVED_HEADS, pin_value_problem, toolchain_value_problem,
                                          tree_sources)

RECIPE_SCHEMA = 1


@dataclass(frozen=True, kw_only=True)
class Component:
    name: str
    source: str
    build_type: str = "Release"
    defines: tuple[tuple[str, str], ...] = ()
    targets: tuple[str, ...] = ()
    outputs: tuple[tuple[str, str], ...] = ()  # (name, path relative to the build dir)
    env: tuple[tuple[str, str], ...] = ()
    artifacts: tuple[str, ...] = ()  # kernel-artifact collectors: spirv, loombc, cubin
    list_separator: str | None = None  # written in list-valued defines instead of ';'
    assemble: "AssembleSpec | None" = None  # how an install prefix is made from the build
    downloads: tuple[DownloadSpec, ...] = ()  # configure-time archives the tool fetches itself

    def components_used(self) -> set[str]:
        """Names of other components this one refers to through ``${name.field}``."""
        refs = set()
        for _, value in (*self.defines, *self.env):
            for ref in INTERPOLATION_RE.findall(value):
                head = ref.split(".", 1)[0]
                if head not in RESERVED_HEADS:
                    refs.add(head)
        return refs


@dataclass(frozen=True, kw_only=True)
class PromptCheck:
    name: str
    prompt: str
    expect: str


@dataclass(frozen=True, kw_only=True)
class SmokeSpec:
    devices: tuple[str, ...] = ("CPU",)
    prompts: tuple[PromptCheck, ...] = ()
    ctx_size: int = 2048
    answer_tokens: int = 16
    speed_tokens: int = 128
    speed_repeats: int = 3
    health_timeout_s: float = 60.0
    # Deadlines: a request gets request_base_s plus its tokens at min_tok_s; the whole
    # smoke stage (every device) gets stage_timeout_s. Both are reported when hit.
    request_base_s: float = 30.0
    min_tok_s: float = 2.0
    stage_timeout_s: float = 900.0
    reference_tok_s: tuple[tuple[str, float], ...] = ()
    tolerance: float = 0.25
    env: tuple[tuple[str, str], ...] = ()
    gpu: str | None = None  # GPU architecture the device list must show (doctor checks it)
    threads: int | None = None  # server threads (-t); None: llama.cpp's default
    # Devices tested when this build's --list-devices shows them, skipped with the reason
    # printed when it does not (e.g. Vulkan0 on a machine without a Vulkan GPU).
    optional_devices: tuple[str, ...] = ()
    skip_reason: str = ""


# The fewest rounds that can decide a speed verdict (verify_run/speed.py says why), the one
# owner of that number: the recipe's verification.rounds, --rounds and the verdict use it.
VERIFY_MIN_ROUNDS = 5


@dataclass(frozen=True, kw_only=True)
class VerificationSpec:
    """How 'verify-run' judges speed: "on par" within ``tolerance`` (a fraction: 0.03 is
    ±3 %); ``rounds`` interleaved rounds, then one more at a time until the verdict is
    decided or ``budget_s`` is spent."""

    tolerance: float = 0.03
    rounds: int = VERIFY_MIN_ROUNDS  # rounds before the first look at the interval
    budget_s: float = 900.0  # seconds of speed rounds per device before "too noisy" is the answer


@dataclass(frozen=True, kw_only=True)
class Recipe:
    path: Path
    name: str
    description: str
    backends: tuple[str, ...]
    components: tuple[Component, ...]
    model: ModelSpec | None = None
    smoke: SmokeSpec = SmokeSpec()
    toolchain: ToolchainSpec | None = None
    verification: VerificationSpec = VerificationSpec()
    requires: RequiresSpec | None = None  # what a machine needs before configure (doctor checks it)
    jit_cache: JitCacheSpec | None = None  # where its GPU backend keeps compiled kernels (location, gc)
    numerics: NumericsSpec | None = None  # smoke's numerical check (None: the recipe has none)

    def sources_used(self, pinned: Iterable[str]) -> set[str]:
        """The pinned sources this recipe builds from or refers to (``${pin.NAME.FIELD}``)."""
        values = [v for c in self.components for _, v in (*c.defines, *c.env)]
        used = {c.source for c in self.components}
        return used | {n for n in pinned if any(f"${{pin.{n}." in v for v in values)}

    def sources_in_order(self) -> list[str]:
        """The sources a run fetches and patches: each component's, then those it takes as a folder."""
        values = [v for c in self.components for _, v in (*c.defines, *c.env)]
        return list(dict.fromkeys([c.source for c in self.components] + tree_sources(values)))

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def server_component(self) -> Component:
        """The component that produces ``llama-server`` (the last one that does)."""
        for c in reversed(self.components):
            if any(n == "llama-server" for n, _ in c.outputs):
                return c
        return self.components[-1]


KNOWN_BACKENDS = {"cpu", "vulkan", "cuda", "hrx"}
KNOWN_COLLECTORS = {"spirv", "loombc", "cubin"}


# Where each number of a recipe may lie, checked at load: a NaN, an infinity, a negative
# timeout or zero repeats never reach a stage.
SECONDS = Range(0, 7 * 24 * 3600, "of seconds", low_open=True)
TOK_S = Range(0, 1e7, "of tokens per second", low_open=True)
FRACTION = Range(0, 0.99, "(a fraction: 0.03 is 3 %)", low_open=True)
NUMBER_RANGES = {
    "ctx_size": Range(1, 1 << 24, "of tokens", whole=True),
    "answer_tokens": Range(1, 1 << 20, "of tokens", whole=True),
    "speed_tokens": Range(1, 1 << 20, "of tokens", whole=True),
    "speed_repeats": Range(1, 1000, "of requests", whole=True),
    "threads": Range(1, 4096, "of threads", whole=True),
    "health_timeout_s": SECONDS, "request_base_s": SECONDS, "stage_timeout_s": SECONDS, "min_tok_s": TOK_S,
    "tolerance": FRACTION, "budget_s": SECONDS,
}


def _str_map(node: Node, key: str) -> tuple[tuple[str, str], ...]:
    sub = node.child(key, required=False)
    if sub is None:
        return ()
    out = []
    for k, v in sub.data.items():
        if isinstance(v, bool):
            v = "ON" if v else "OFF"
        if not isinstance(v, (str, int, float)):
            sub.fail(f"value must be a string, found {v!r}", "quote the value", key=str(k))
        out.append((str(k), str(v)))
    return tuple(out)


def order_components(components: list[Component], file: Path) -> list[Component]:
    """Topological order by ``${name.field}`` references; cycles and unknown names are errors.
    Ties keep the order of the file."""
    names = [c.name for c in components]
    by_name = {c.name: c for c in components}
    for c in components:
        for ref in c.components_used():
            if ref not in by_name:
                raise ConfigError(
                    f"{file}: components.{c.name}: refers to unknown component {ref!r}",
                    hint=f"use one of: {', '.join(names)} (or pin.SOURCE.FIELD)",
                )
            if ref == c.name:
                raise ConfigError(f"{file}: components.{c.name}: refers to itself", hint="remove the self reference")
    sorter = graphlib.TopologicalSorter({c.name: c.components_used() for c in components})
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        raise ConfigError(
            f"{file}: components: reference cycle {' -> '.join(reversed(exc.args[1]))}",
            hint="a component may only refer to components built before it",
        ) from None
    position = {n: i for i, n in enumerate(names)}
    done: list[str] = []
    ready: list[str] = []
    while sorter.is_active():  # of the components ready, the one first in the file goes first
        ready += sorter.get_ready()
        first = min(ready, key=position.__getitem__)
        ready.remove(first)
        done.append(first)
        sorter.done(first)
    return [by_name[n] for n in done]


def load_recipe(path: Path, pins: Pins) -> Recipe:
    path = Path(path).resolve()
    root = Node(path, "", load_yaml(path, "recipe"))
    root.only({"schema", "name", "description", "backends", "components", "model", "smoke", "toolchain", "verification",
               "requires", "jit_cache", "numerics"})
    check_schema(root, RECIPE_SCHEMA)
    toolchain = load_toolchain(root)
    name = root.get("name", str)
    if not is_file_name(name):
        root.fail(f"recipe name {name!r} is not a name",
                  "use letters, digits, '.', '-' and '_', starting with a letter or digit", key="name")
    if name != path.stem:
        root.fail(f"name {name!r} differs from the file name {path.stem!r}",
                  f"rename the file to {name}.yaml or fix the name", key="name")
    backends = _load_backends(root)
    components = order_components(_load_components(root, pins, toolchain), path)
    model = load_model(root)
    smoke = _load_smoke(root, toolchain)
    return Recipe(
        path=path,
        name=name,
        description=root.get("description", str, required=False, default=""),
        backends=backends,
        components=tuple(components),
        model=model,
        smoke=smoke,
        toolchain=toolchain,
        verification=_load_verification(root),
        requires=load_requires(root, {c.name for c in components}),
        jit_cache=load_jit_cache(root), numerics=load_numerics(root),
    )


def _load_verification(root: Node) -> VerificationSpec:
    node = root.child("verification", required=False)
    if node is None:
        return VerificationSpec()
    node.only({"tolerance", "rounds", "budget_s"})
    d = VerificationSpec()
    # The least rounds give the first look at the interval: fewer cannot reach a verdict.
    rounds = node.number("rounds", Range(VERIFY_MIN_ROUNDS, 1000, "of rounds", whole=True), default=d.rounds)
    return VerificationSpec(tolerance=node.number("tolerance", FRACTION, default=d.tolerance), rounds=rounds,
                            budget_s=node.number("budget_s", SECONDS, default=d.budget_s))


def _load_backends(root: Node) -> tuple[str, ...]:
    backends = root.str_list("backends")
    for b in backends:
        if b not in KNOWN_BACKENDS:
            root.fail(f"unknown backend {b!r}", f"use some of: {', '.join(sorted(KNOWN_BACKENDS))}", key="backends")
    return backends


def _load_components(root: Node, pins: Pins, toolchain: ToolchainSpec | None) -> list[Component]:
    comps_raw = root.get("components", list)
    if not comps_raw:
        root.fail("no components", "add at least one component", key="components")
    components: list[Component] = []
    for i, raw in enumerate(comps_raw):
        node = Node(root.file, f"components[{i}]", raw)
        node.only({"name", "source", "build_type", "defines", "targets", "outputs", "env", "artifacts",
                   "list_separator", "assemble", "downloads"})
        cname = node.get("name", str)
        if not is_component_name(cname):
            node.fail(f"component name {cname!r} is not a name",
                      "use letters, digits, '-' and '_', starting with a letter", key="name")
        if cname in RESERVED_HEADS or any(c.name == cname for c in components):
            node.fail(f"duplicate or reserved component name {cname!r}", "give each component its own name", key="name")
        components.append(_load_component(node, cname, pins, toolchain))
    return components


def _load_component(node: Node, name: str, pins: Pins, toolchain: ToolchainSpec | None) -> Component:
    source = node.get("source", str)
    if source not in pins.sources:
        node.fail(
            f"unknown source {source!r}",
            f"add it to {pins.path.name} or use one of: {', '.join(sorted(pins.sources))}",
            key="source",
        )
    defines = _str_map(node, "defines")
    for key, _ in defines:
        if not is_cmake_name(key):
            node.fail(f"define {key!r} is not a CMake variable name",
                      "use letters, digits and '_' only, not starting with a digit", key="defines")
    _check_pin_refs(node, defines, pins)
    _check_toolchain_refs(node, (*defines, *_str_map(node, "env")), toolchain)
    artifacts = node.str_list("artifacts", required=False)
    for a in artifacts:
        if a not in KNOWN_COLLECTORS:
            node.fail(f"unknown artifact collector {a!r}", f"use some of: {', '.join(sorted(KNOWN_COLLECTORS))}",
                      key="artifacts")
    targets = node.str_list("targets")
    if not targets:
        node.fail("no targets", "list the CMake targets to build", key="targets")
    return Component(
        name=name,
        source=source,
        build_type=node.get("build_type", str, required=False, default="Release"),
        defines=defines,
        targets=targets,
        outputs=_load_outputs(node),
        env=_str_map(node, "env"),
        artifacts=artifacts,
        list_separator=_list_separator(node),
        assemble=load_assemble(node, node.file.parent),
        downloads=load_downloads(node),
    )


def _load_outputs(node: Node) -> tuple[tuple[str, str], ...]:
    """The outputs: names as component names are, paths (or globs) relative to the build
    folder that cannot leave it (collecting checks again after symbolic links)."""
    outputs = _str_map(node, "outputs")
    for name, rel in outputs:
        if not is_component_name(name):
            node.fail(f"output name {name!r} is not a name",
                      "use letters, digits, '-' and '_', starting with a letter", key="outputs")
        if not relative_inside(rel):
            node.fail(f"output {name}: {rel!r} leaves the build folder",
                      "give a path relative to the build folder, without '..'", key="outputs")
    return outputs


def _check_pin_refs(node: Node, defines: Iterable[tuple[str, str]], pins: Pins) -> None:
    """Each ``${pin.SOURCE.FIELD}`` of the defines names a pinned source and a field it has."""
    for key, value in defines:
        problem = pin_value_problem(key, value, pins)
        if problem is not None:
            node.fail(*problem, key="defines")


SMOKE_KEYS = {
    "devices", "prompts", "ctx_size", "answer_tokens", "speed_tokens", "speed_repeats",
    "health_timeout_s", "reference_tok_s", "tolerance", "env", "threads", "gpu", "optional_devices", "skip_reason",
    "request_base_s", "min_tok_s", "stage_timeout_s",
}


def _load_smoke(root: Node, toolchain: ToolchainSpec | None) -> SmokeSpec:
    snode = root.child("smoke", required=False)
    if snode is None:
        return SmokeSpec()
    snode.only(SMOKE_KEYS)
    prompts = _load_prompts(snode)
    d = SmokeSpec()
    numbers = {key: snode.number(key, rng, default=getattr(d, key))
               for key, rng in NUMBER_RANGES.items() if hasattr(d, key)}
    smoke = SmokeSpec(
        devices=snode.str_list("devices", required=False) or ("CPU",),
        prompts=prompts,
        **numbers,
        reference_tok_s=_reference_speeds(snode),
        env=_str_map(snode, "env"),
        gpu=snode.get("gpu", str, required=False),
        optional_devices=snode.str_list("optional_devices", required=False),
        skip_reason=snode.get("skip_reason", str, required=False, default=""),
    )
    _check_toolchain_refs(snode, smoke.env, toolchain)
    return smoke


def _reference_speeds(snode: Node) -> tuple[tuple[str, float], ...]:
    rnode = snode.child("reference_tok_s", required=False)
    if rnode is None:
        return ()
    return tuple((str(dev), float(rnode.number(str(dev), TOK_S, required=True))) for dev in rnode.data)


def _load_prompts(snode: Node) -> tuple[PromptCheck, ...]:
    prompts = []
    for i, p in enumerate(snode.get("prompts", list, required=False, default=[])):
        pnode = Node(snode.file, snode.where(f"prompts[{i}]"), p)
        pnode.only({"name", "prompt", "expect"})
        prompts.append(PromptCheck(name=pnode.get("name", str), prompt=pnode.get("prompt", str),
                                   expect=pnode.get("expect", str)))
    return tuple(prompts)


def _check_toolchain_refs(node: Node, values: Iterable[tuple[str, str]], toolchain: ToolchainSpec | None) -> None:
    for key, value in values:
        problem = toolchain_value_problem(key, value, toolchain)
        if problem is not None:
            node.fail(*problem)


def _list_separator(node: Node) -> str | None:
    sep = node.get("list_separator", str, required=False)
    if sep is not None and (len(sep) != 1 or sep in ";$\\{}" or sep.isalnum() or sep.isspace()):
        node.fail(f"{sep!r} cannot separate list items", "use one punctuation mark such as '|'", key="list_separator")
    return sep


def find_recipe(recipes_dir: Path, name: str) -> Path:
    path = recipes_dir / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in recipes_dir.glob("*.yaml"))) or f"(none found in {recipes_dir})"
        raise ConfigError(f"unknown recipe {name!r}", hint=f"use one of: {known}")
    return inside_recipes(path, recipes_dir)


def inside_recipes(path: Path, recipes_dir: Path) -> Path:
    """``path``, a recipe file of the project's ``recipes_dir``, resolved; refused when a link
    takes it out of that folder (it would read and quote a file that is not a recipe)."""
    real = resolved(path, "recipe")
    if not real.is_relative_to(resolved(recipes_dir, "the recipes folder")):
        raise ConfigError(f"{path}: a symbolic link leads out of {recipes_dir}; it is not read",
                          hint="put the recipe itself in the folder, or pass the file with --recipe FILE")
    return real
