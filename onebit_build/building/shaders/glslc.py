"""The shader cache's launcher: stands in for glslc inside a build (ggml-vulkan's
``vulkan-shaders-gen`` runs it once per shader variant) and answers a compile it has seen
before from the cache, in this or another workspace, at any path, on any machine sharing
the cache.

A compile's key is the glslc identity (its ``--version`` text), its arguments with the input,
output and dependency-file paths replaced by placeholders, and the source: the contents of
the input and of every file an ``#include`` line in it (or in those files) names, by their
paths relative to the input's folder (a superset of what the preprocessor reads: a change
in any of them misses). Where an include cannot be followed that way, the preprocessed
source (``glslc -E``) with the input's folder replaced by a placeholder stands instead
(measured here: ``glslc -E`` costs about as much as compiling a small shader, so the first
form keeps a hit at the cost of starting Python). The value is the SPIR-V
and the dependency file with the same paths mapped, behind a header with their sha256 (an
entry whose bytes do not match it is refused, wherever it was read). Entries live in a local
folder and, when the compiler cache has one, in its shared store: Redis, an S3-compatible
bucket or a WebDAV folder (read local first, write both).

This file runs as its own program: the build writes it into the build folder as a module,
beside its settings ``glslc.json`` and a short program with a shebang of the tool's Python,
in isolated mode without site, that imports it (so that Python compiles it once, not at
every call). It imports the standard library only. It never runs a value as a shell
command; anything it does not understand, and any cache error, goes to the real glslc with
the arguments unchanged. Each call appends one
line to the statistics file: ``hit local``, ``hit redis`` (``hit s3``, ``hit webdav``), ``miss``,
``uncacheable`` or ``error WHAT``.
"""

from __future__ import annotations

import os
import sys

# A build runs this program once per shader, and a hit should cost little more than starting
# Python: what only a miss, a fallback or Redis needs (subprocess, socket) is imported where
# it is used, the include lines are read without the re module, paths are handled with
# os.path, and JSON (glslc_json) and SHA-256 come from the interpreter's own accelerator
# modules where it has them (importing json, pathlib and hashlib took about as long as the
# rest of a hit).
try:
    from _sha256 import sha256  # CPython 3.11
except ImportError:  # pragma: no cover - other interpreters
    try:
        from _sha2 import sha256  # CPython 3.12 and later
    except ImportError:
        from hashlib import sha256
try:  # the JSON helpers: beside this file in a build folder, else this package's
    from onebit_glslc_json import dumps, loads
except ImportError:
    from onebit_build.building.shaders.glslc_json import dumps, loads

SCHEMA = 1  # of the entries (part of every key)
SETTINGS_SCHEMA = 2  # of glslc.json (2: the shared store is "remote", of any kind)
MAGIC = b"onebit-glslc/1\n"
OUT_TOKEN = b"@ONEBIT-OUT@"
SRC_TOKEN = b"@ONEBIT-SRC@"
# Flags that take no value and change nothing but the output (kept in the key as they are).
PLAIN_FLAGS = ("-O", "-O0", "-Os", "-g", "-MD", "-w", "-Werror")
PREFIXED_FLAGS = ("-fshader-stage=", "--target-env=", "--target-spv=", "-std=", "-D", "-U")


def include_names(data: bytes) -> list[tuple[str, str]] | None:
    """``("quoted" | "angled", name)`` for each ``#include`` line of ``data``, in order; None
    when one has another form (a macro, a block comment after it). Pure."""
    names = []
    for line in data.split(b"\n"):
        text = line.strip()
        if not text.startswith(b"#"):
            continue
        rest = text[1:].lstrip()
        if not rest.startswith(b"include"):
            continue
        arg = rest[len(b"include"):]
        if arg[:1] not in (b" ", b"\t", b'"', b"<"):
            continue  # another directive that starts with the word (#include_next is not GLSL)
        arg = arg.strip()
        close = {b'"': b'"', b"<": b">"}.get(arg[:1])
        end = arg.find(close, 1) if close else -1
        if end <= 1:
            return None
        tail = arg[end + 1:].strip()
        if tail and not tail.startswith(b"//"):
            return None
        names.append(("quoted" if close == b'"' else "angled", os.fsdecode(arg[1:end])))
    return names


class Uncacheable(Exception):
    """The arguments are not a plain compile of one file to one file."""


# --------------------------------------------------------------------------- the compile (pure)


def parse(argv: list[str]) -> dict:
    """``{"input", "output", "depfile", "args"}`` for a plain compile; ``args`` is ``argv``
    with the three paths replaced by ``<in>``, ``<out>`` and ``<dep>``. Pure."""
    job: dict = {"input": None, "output": None, "depfile": None, "args": []}
    it = iter(argv)
    for word in it:
        if word in ("-o", "-MF"):
            value = next(it, None)
            if value is None or value == "-" or value.startswith("-"):
                raise Uncacheable(f"{word} without a file")
            slot, token = ("output", "<out>") if word == "-o" else ("depfile", "<dep>")
            if job[slot] is not None:
                raise Uncacheable(f"{word} given twice")
            job[slot] = value
            job["args"] += [word, token]
        elif word in PLAIN_FLAGS or (word.startswith(PREFIXED_FLAGS) and "\n" not in word):
            job["args"].append(word)
        elif word.startswith("-") or job["input"] is not None or not word:
            raise Uncacheable(f"argument {word!r}")
        else:
            job["input"] = word
            job["args"].append("<in>")
    if job["input"] is None or job["output"] is None:
        raise Uncacheable("no input or no output file")
    if ("-MD" in argv) != (job["depfile"] is not None):
        raise Uncacheable("-MD without -MF or the other way round")
    return job


def preprocess_argv(glslc: str, argv: list[str], job: dict) -> list[str]:
    """The glslc command that prints the preprocessed source of ``job`` on stdout. Pure."""
    out, skip = [glslc, "-E"], False
    for word in argv:
        if skip:
            skip = False
        elif word in ("-o", "-MF"):
            skip = True
        elif word != "-MD":
            out.append(word)
    return out


def source_dir(job: dict) -> bytes:
    return os.fsencode(os.path.dirname(os.path.abspath(job["input"]))) + b"/"


def include_closure(path: str | os.PathLike[str]) -> str | None:
    """The digest of ``path`` and of every file its ``#include`` lines name, followed
    recursively (relative to the including file, as glslc resolves them without ``-I``),
    each by its path relative to ``path``'s folder; a named file that is missing counts as
    missing. None when an include line has another form (the caller preprocesses instead)."""
    path = os.fspath(path)
    root = os.path.dirname(path)
    seen: dict[str, str | None] = {}
    todo = [path]
    while todo:
        f = todo.pop()
        rel = os.path.relpath(f, root)
        if rel in seen:
            continue
        try:
            with open(f, "rb") as fh:
                data = fh.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            seen[rel] = None
            continue
        seen[rel] = sha256(data).hexdigest()
        names = include_names(data)
        if names is None:
            return None
        for form, name in names:
            if form == "quoted":
                todo.append(os.path.join(os.path.dirname(f), name))
            else:  # <name>: glslc searches only -I folders, and the launcher allows none
                seen[f"<{name}>"] = None
    return sha256(dumps(sorted(seen.items())).encode()).hexdigest()


def preprocessed_digest(job: dict, preprocessed: bytes) -> str:
    """The digest of ``glslc -E``'s output with the input's folder mapped. Pure."""
    return sha256(preprocessed.replace(source_dir(job), SRC_TOKEN + b"/")).hexdigest()


def cache_key(identity: str, job: dict, source: str) -> str:
    """The entry's name: glslc, the mapped arguments and the source's digest (``includes:``
    or ``preprocessed:`` followed by the digest). With ``-g`` the SPIR-V names the source
    file, so its real path stays in the key. Pure."""
    doc = {"schema": SCHEMA, "glslc": identity, "args": job["args"], "source": source}
    if "-g" in job["args"]:
        doc["input"] = os.path.abspath(job["input"])
    return sha256(dumps(doc).encode()).hexdigest()


def pack(spv: bytes, dep: bytes | None, job: dict) -> bytes:
    """One entry: a header line, the SPIR-V and the dependency file with its paths mapped. Pure."""
    mapped = b""
    if dep is not None:
        mapped = dep.replace(os.fsencode(job["output"]), OUT_TOKEN).replace(source_dir(job), SRC_TOKEN + b"/")
    head = {"spv": len(spv), "sha256": sha256(spv + mapped).hexdigest(),
            "dep": len(mapped) if dep is not None else None}
    return MAGIC + dumps(head).encode() + b"\n" + spv + mapped


def unpack(blob: bytes, job: dict) -> tuple[bytes, bytes | None]:
    """The SPIR-V and this compile's dependency file from an entry; ValueError when the entry
    is damaged or was stored for a compile with no dependency file. Pure."""
    if not blob.startswith(MAGIC):
        raise ValueError("not an entry")
    head_line, _, rest = blob[len(MAGIC):].partition(b"\n")
    head = loads(head_line.decode())
    spv, tail = rest[:head["spv"]], rest[head["spv"]:]
    if sha256(rest).hexdigest() != head["sha256"]:
        raise ValueError("damaged entry")
    if (head["dep"] is None) != (job["depfile"] is None) or len(tail) != (head["dep"] or 0):
        raise ValueError("entry without the dependency file")
    if job["depfile"] is None:
        return spv, None
    dep = tail.replace(OUT_TOKEN, os.fsencode(job["output"])).replace(SRC_TOKEN + b"/", source_dir(job))
    return spv, dep


# --------------------------------------------------------------------------- the stores


def _write_atomic(path: str, data: bytes, *, make_parent: bool = True) -> None:
    """``data`` into ``path`` through a temporary file and a rename, with the mode a file
    glslc writes gets (``0666`` less the umask; a temporary file starts at ``0600``)."""
    folder, name = os.path.split(path)
    if make_parent:
        os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


class LocalStore:
    def __init__(self, folder: str):
        self.folder = folder

    def _path(self, key: str) -> str:
        return os.path.join(self.folder, key[:2], key)

    def get(self, key: str) -> bytes | None:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def put(self, key: str, blob: bytes) -> None:
        _write_atomic(self._path(key), blob)


# --------------------------------------------------------------------------- one call


def remote_store(conf: dict):
    """The shared store (its module only when a build has one): beside this file in a build
    folder, else this package's."""
    prefix = f"onebit-glslc/{SCHEMA}/"
    if conf["kind"] == "redis":
        try:
            from onebit_glslc_redis import RedisStore
        except ImportError:
            from onebit_build.building.shaders.glslc_redis import RedisStore
        return RedisStore(conf, prefix=prefix)
    try:
        from onebit_glslc_http import S3Store, WebDavStore
    except ImportError:
        from onebit_build.building.shaders.glslc_http import S3Store, WebDavStore
    return (S3Store if conf["kind"] == "s3" else WebDavStore)(conf, prefix=prefix)


class Launch:
    """One call of the launcher with its settings (``glslc.json``)."""

    def __init__(self, conf: dict, argv: list[str]):
        self.conf = conf
        self.argv = argv
        self.glslc = conf["glslc"]
        self.stats = conf["stats"]
        self.local = LocalStore(conf["local"])
        self.remote = remote_store(conf["remote"]) if conf.get("remote") else None
        self.kind = conf["remote"]["kind"] if conf.get("remote") else ""
        self.remote_down = os.path.join(os.path.dirname(self.stats), "remote-down")

    def record(self, what: str) -> None:
        try:
            fd = os.open(self.stats, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, (what.replace("\n", " ")[:200] + "\n").encode())
            finally:
                os.close(fd)
        except OSError:
            pass

    def real(self) -> int:
        """The real glslc in this process's place, with the arguments as given."""
        try:
            os.execv(self.glslc, [self.glslc, *self.argv])
        except OSError as exc:
            print(f"error: cannot run glslc {self.glslc}: {exc.strerror}; install it or configure the build again",
                  file=sys.stderr)
        return 127

    def identity_ok(self) -> bool:
        st = os.stat(self.glslc)
        ident = self.conf["identity"]
        return (st.st_size, st.st_mtime_ns) == (ident["size"], ident["mtime_ns"])

    def lookup(self, key: str) -> tuple[bytes | None, str]:
        blob = self.local.get(key)
        if blob is not None:
            return blob, "local"
        if self.remote is None or os.path.exists(self.remote_down):
            return None, ""
        try:
            blob = self.remote.get(key)
        except (OSError, ValueError) as exc:
            self._remote_failed(exc)
            return None, ""
        return blob, self.kind  # kept here only once it unpacks (see restore)

    def store(self, key: str, blob: bytes) -> None:
        self.local.put(key, blob)
        if self.remote is not None and not os.path.exists(self.remote_down):
            try:
                self.remote.put(key, blob)
            except (OSError, ValueError) as exc:
                self._remote_failed(exc)

    def _remote_failed(self, exc: Exception) -> None:
        """The rest of the build skips the shared store (one wait for a dead server, not one per
        shader); the build says so in one warning line."""
        self.record(f"error {self.kind}: {exc}")
        try:
            with open(self.remote_down, "w") as f:
                f.write(str(exc)[:200])
        except OSError:
            pass

    def run(self) -> int:
        try:
            job = parse(self.argv)
        except Uncacheable:
            self.record("uncacheable")
            return self.real()
        try:
            if not self.identity_ok():
                raise ValueError("glslc changed since the build was configured")
            source = self.source_digest(job)
            key = cache_key(self.conf["identity"]["version"], job, source) if source else ""
            blob, where = self.lookup(key) if key else (None, "")
        except Exception as exc:  # any cache error: the real glslc compiles, as without a cache
            self.record(f"error lookup: {exc}")
            return self.real()
        if not key:
            self.record("uncacheable")  # glslc cannot preprocess it: the real compile says why
            return self.real()
        if blob is not None and self.restore(job, blob):
            if where != "local":
                try:
                    self.local.put(key, blob)
                except OSError as exc:
                    self.record(f"error store: {exc}")
            self.record(f"hit {where}")
            return 0
        return self.compile_and_store(job, key)

    def source_digest(self, job: dict) -> str | None:
        """The include closure's digest, else the preprocessed source's; None when glslc
        cannot preprocess the input."""
        closure = include_closure(job["input"])
        if closure is not None:
            return f"includes:{closure}"
        import subprocess  # only for a preprocessed key (see the imports above)

        pre = subprocess.run(preprocess_argv(self.glslc, self.argv, job), capture_output=True, timeout=600)
        if pre.returncode != 0 or pre.stderr:
            return None
        return f"preprocessed:{preprocessed_digest(job, pre.stdout)}"

    def restore(self, job: dict, blob: bytes) -> bool:
        try:
            spv, dep = unpack(blob, job)
            # Into existing folders only, as glslc writes (where it would fail, it fails).
            _write_atomic(job["output"], spv, make_parent=False)
            if dep is not None:
                _write_atomic(job["depfile"], dep, make_parent=False)
            return True
        except Exception as exc:  # a damaged entry of any shape is a miss
            self.record(f"error entry: {exc}")
            return False

    def compile_and_store(self, job: dict, key: str) -> int:
        import subprocess  # only for a miss (see the imports above)

        done = subprocess.run([self.glslc, *self.argv], capture_output=True)
        sys.stdout.buffer.write(done.stdout)
        sys.stderr.buffer.write(done.stderr)
        if done.returncode != 0 or done.stderr:
            self.record("miss")
            return done.returncode
        self.record("miss")
        try:
            spv = _read(job["output"])
            dep = _read(job["depfile"]) if job["depfile"] else None
            self.store(key, pack(spv, dep, job))
        except OSError as exc:
            self.record(f"error store: {exc}")
        return 0


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def main(argv: list[str]) -> int:
    settings = os.path.join(os.path.dirname(os.path.abspath(__file__)), "glslc.json")
    try:
        conf = loads(_read(settings).decode())
        if conf.get("schema") != SETTINGS_SCHEMA:
            raise ValueError(f"schema {conf.get('schema')!r}")
    except (OSError, ValueError) as exc:
        print(f"error: glslc launcher settings {settings}: {exc}; configure the build again", file=sys.stderr)
        return 2
    return Launch(conf, argv).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
