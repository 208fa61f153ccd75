"""The shader cache's launcher: stands in for glslc inside a build (ggml-vulkan's
``vulkan-shaders-gen`` runs it once per shader variant) and answers a compile it has seen
before from the cache, in this or another workspace, at any path, on any machine sharing
the cache.

A compile's key is the glslc identity (its ``--version`` text), its arguments with the input,
output and dependency-file paths replaced by placeholders, and the preprocessed source
(``glslc -E``) with the input's folder replaced by a placeholder. The value is the SPIR-V
and the dependency file with the same paths mapped. Entries live in a local folder and,
when one is configured, in Redis (read local first, write both).

This file runs as its own program (the build writes it with a shebang of the tool's Python,
in isolated mode, beside its settings ``glslc.json``): it imports the standard library
only. It never runs a value as a shell command; anything it does not understand, and any
cache error, goes to the real glslc with the arguments unchanged. Each call appends one
line to the statistics file: ``hit local``, ``hit redis``, ``miss``, ``uncacheable`` or
``error WHAT``.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

SCHEMA = 1
MAGIC = b"onebit-glslc/1\n"
OUT_TOKEN = b"@ONEBIT-OUT@"
SRC_TOKEN = b"@ONEBIT-SRC@"
# Flags that take no value and change nothing but the output (kept in the key as they are).
PLAIN_FLAGS = ("-O", "-O0", "-Os", "-g", "-MD", "-w", "-Werror")
PREFIXED_FLAGS = ("-fshader-stage=", "--target-env=", "--target-spv=", "-std=", "-D", "-U")
REDIS_TIMEOUT_S = 2.0


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
    return os.fsencode(str(Path(job["input"]).absolute().parent)) + b"/"


def cache_key(identity: str, job: dict, preprocessed: bytes) -> str:
    """The entry's name: glslc, the mapped arguments and the mapped preprocessed source.
    With ``-g`` the SPIR-V names the source file, so its real path stays in the key. Pure."""
    text = preprocessed.replace(source_dir(job), SRC_TOKEN + b"/")
    doc = {"schema": SCHEMA, "glslc": identity, "args": job["args"],
           "source": hashlib.sha256(text).hexdigest()}
    if "-g" in job["args"]:
        doc["input"] = str(Path(job["input"]).absolute())
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def pack(spv: bytes, dep: bytes | None, job: dict) -> bytes:
    """One entry: a header line, the SPIR-V and the dependency file with its paths mapped. Pure."""
    mapped = b""
    if dep is not None:
        mapped = dep.replace(os.fsencode(job["output"]), OUT_TOKEN).replace(source_dir(job), SRC_TOKEN + b"/")
    head = {"spv": len(spv), "sha256": hashlib.sha256(spv + mapped).hexdigest(), "dep": len(mapped) if dep is not None else None}
    return MAGIC + json.dumps(head, sort_keys=True).encode() + b"\n" + spv + mapped


def unpack(blob: bytes, job: dict) -> tuple[bytes, bytes | None]:
    """The SPIR-V and this compile's dependency file from an entry; ValueError when the entry
    is damaged or was stored for a compile with no dependency file. Pure."""
    if not blob.startswith(MAGIC):
        raise ValueError("not an entry")
    head_line, _, rest = blob[len(MAGIC):].partition(b"\n")
    head = json.loads(head_line)
    spv, tail = rest[:head["spv"]], rest[head["spv"]:]
    if hashlib.sha256(rest).hexdigest() != head["sha256"]:
        raise ValueError("damaged entry")
    if (head["dep"] is None) != (job["depfile"] is None) or len(tail) != (head["dep"] or 0):
        raise ValueError("entry without the dependency file")
    if job["depfile"] is None:
        return spv, None
    dep = tail.replace(OUT_TOKEN, os.fsencode(job["output"])).replace(SRC_TOKEN + b"/", source_dir(job))
    return spv, dep


# --------------------------------------------------------------------------- the stores


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


class LocalStore:
    def __init__(self, folder: str):
        self.folder = Path(folder)

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / key

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def put(self, key: str, blob: bytes) -> None:
        _write_atomic(self._path(key), blob)


def _resp(*words: bytes) -> bytes:
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)


class RedisStore:
    """GET and SET over one short-lived connection (RESP, no client library)."""

    def __init__(self, conf: dict):
        self.conf = conf

    def _talk(self, *commands: tuple[bytes, ...]) -> list[bytes | None]:
        c = self.conf
        with socket.create_connection((c["host"], int(c["port"])), timeout=REDIS_TIMEOUT_S) as s:
            first: list[tuple[bytes, ...]] = []
            if c.get("password"):
                user = [c["username"].encode()] if c.get("username") else []
                first.append((b"AUTH", *user, c["password"].encode()))
            if c.get("db"):
                first.append((b"SELECT", str(int(c["db"])).encode()))
            s.sendall(b"".join(_resp(*cmd) for cmd in (*first, *commands)))
            reader = s.makefile("rb")
            answers = [_read_answer(reader) for _ in range(len(first) + len(commands))]
        return answers[len(first):]

    def get(self, key: str) -> bytes | None:
        return self._talk((b"GET", f"onebit-glslc/{SCHEMA}/{key}".encode()))[0]

    def put(self, key: str, blob: bytes) -> None:
        self._talk((b"SET", f"onebit-glslc/{SCHEMA}/{key}".encode(), blob))


def _read_answer(reader) -> bytes | None:
    line = reader.readline()
    if not line.endswith(b"\r\n"):
        raise OSError("Redis closed the connection")
    kind, body = line[:1], line[1:-2]
    if kind == b"-":
        raise OSError(f"Redis: {body.decode(errors='replace')[:80]}")
    if kind == b"$":
        size = int(body)
        if size < 0:
            return None
        data = reader.read(size + 2)
        if len(data) != size + 2:
            raise OSError("Redis closed the connection")
        return data[:-2]
    if kind in (b"+", b":"):
        return body
    raise OSError(f"Redis answered {kind!r}")


# --------------------------------------------------------------------------- one call


class Launch:
    """One call of the launcher with its settings (``glslc.json``)."""

    def __init__(self, conf: dict, argv: list[str]):
        self.conf = conf
        self.argv = argv
        self.glslc = conf["glslc"]
        self.stats = Path(conf["stats"])
        self.local = LocalStore(conf["local"])
        self.redis = RedisStore(conf["redis"]) if conf.get("redis") else None
        self.redis_down = self.stats.with_name("redis-down")

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
        """The real glslc with the arguments as given (its output passes through)."""
        return subprocess.run([self.glslc, *self.argv]).returncode

    def identity_ok(self) -> bool:
        st = os.stat(self.glslc)
        ident = self.conf["identity"]
        return (st.st_size, st.st_mtime_ns) == (ident["size"], ident["mtime_ns"])

    def lookup(self, key: str) -> tuple[bytes | None, str]:
        blob = self.local.get(key)
        if blob is not None:
            return blob, "local"
        if self.redis is None or self.redis_down.exists():
            return None, ""
        try:
            blob = self.redis.get(key)
        except (OSError, ValueError) as exc:
            self._redis_failed(exc)
            return None, ""
        if blob is not None:
            self.local.put(key, blob)
        return blob, "redis"

    def store(self, key: str, blob: bytes) -> None:
        self.local.put(key, blob)
        if self.redis is not None and not self.redis_down.exists():
            try:
                self.redis.put(key, blob)
            except (OSError, ValueError) as exc:
                self._redis_failed(exc)

    def _redis_failed(self, exc: Exception) -> None:
        """The rest of the build skips Redis (one wait for a dead server, not one per shader)."""
        self.record(f"error redis: {exc}")
        try:
            self.redis_down.write_text(str(exc)[:200])
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
            pre = subprocess.run(preprocess_argv(self.glslc, self.argv, job), capture_output=True, timeout=600)
            if pre.returncode != 0 or pre.stderr:
                self.record("uncacheable")  # the real compile reports the problem
                return self.real()
            key = cache_key(self.conf["identity"]["version"], job, pre.stdout)
            blob, where = self.lookup(key)
        except Exception as exc:  # any cache error: the real glslc compiles, as without a cache

            self.record(f"error lookup: {exc}")
            return self.real()
        if blob is not None and self.restore(job, blob):
            self.record(f"hit {where}")
            return 0
        return self.compile_and_store(job, key)

    def restore(self, job: dict, blob: bytes) -> bool:
        try:
            spv, dep = unpack(blob, job)
            _write_atomic(Path(job["output"]), spv)
            if dep is not None:
                _write_atomic(Path(job["depfile"]), dep)
            return True
        except Exception as exc:  # a damaged entry of any shape is a miss
            self.record(f"error entry: {exc}")
            return False

    def compile_and_store(self, job: dict, key: str) -> int:
        done = subprocess.run([self.glslc, *self.argv], capture_output=True)
        sys.stdout.buffer.write(done.stdout)
        sys.stderr.buffer.write(done.stderr)
        if done.returncode != 0 or done.stderr:
            self.record("miss")
            return done.returncode
        try:
            spv = Path(job["output"]).read_bytes()
            dep = Path(job["depfile"]).read_bytes() if job["depfile"] else None
            self.store(key, pack(spv, dep, job))
            self.record("miss")
        except OSError as exc:
            self.record(f"error store: {exc}")
        return 0


def main(argv: list[str]) -> int:
    settings = Path(__file__).with_name("glslc.json")
    try:
        conf = json.loads(settings.read_text())
        if conf.get("schema") != SCHEMA:
            raise ValueError(f"schema {conf.get('schema')!r}")
    except (OSError, ValueError) as exc:
        print(f"error: glslc launcher settings {settings}: {exc}; configure the build again", file=sys.stderr)
        return 2
    return Launch(conf, argv).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
