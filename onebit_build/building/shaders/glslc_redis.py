"""The shader cache launcher's Redis store: GET and SET of entries over RESP, with no client
library. Written beside the launcher (``glslc.py``) into a build folder as its own module, and
imported there only by builds that share a Redis; the standard library only."""

from __future__ import annotations

import socket

REDIS_TIMEOUT_S = 2.0


def _resp(*words: bytes) -> bytes:
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)


class RedisStore:
    """GET and SET over one short-lived connection (RESP, no client library)."""

    def __init__(self, conf: dict, *, prefix: str):
        self.conf = conf
        self.prefix = prefix  # of every entry's name: the launcher's schema

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
        return self._talk((b"GET", f"{self.prefix}{key}".encode()))[0]

    def put(self, key: str, blob: bytes) -> None:
        self._talk((b"SET", f"{self.prefix}{key}".encode(), blob))


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
