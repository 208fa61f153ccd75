"""A local stand-in in front of a shared Redis, so that a shared compiler cache that goes
away never slows the build down.

sccache reaches Redis through a connection pool that, when the server is gone, retries
for about 30 seconds on every lookup and every store (measured with sccache 0.16: a
2-core build went from 1 to 12 minutes when Redis stopped half-way), and refuses to start
at all when Redis is down at the start. The guard sits between the two on 127.0.0.1:
while the shared Redis answers, bytes pass through unchanged; when it cannot be reached,
the guard answers as an empty cache (every lookup a miss, every store accepted and
dropped), so each compile goes on locally at full speed. It tries the shared server again
every ``retry_after`` seconds, and says what happened in :attr:`RedisGuard.outage`.

Written here, not taken from a library: a Redis client library (redis-py) talks to Redis
as a client, and a TCP proxy passes bytes through but cannot answer as an empty cache
when the server is gone. The fallback needs both halves at once, the few commands sccache
sends parsed and answered locally, which is all this module does.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable

# Commands whose "empty cache" answer is not +OK.
_NIL = b"$-1\r\n"
_ZERO = b":0\r\n"
_EMPTY_ANSWERS = {
    b"PING": b"+PONG\r\n",
    b"GET": _NIL, b"GETDEL": _NIL, b"GETEX": _NIL,
    b"GETRANGE": b"$0\r\n\r\n",
    b"EXISTS": _ZERO, b"DEL": _ZERO, b"UNLINK": _ZERO, b"STRLEN": _ZERO,
    b"TTL": b":-2\r\n", b"PTTL": b":-2\r\n",
}
_LOOKUPS = {b"GET", b"GETDEL", b"GETEX", b"GETRANGE", b"MGET"}
_STORES = {b"SET", b"SETEX", b"PSETEX", b"SETNX", b"MSET", b"APPEND", b"SETRANGE"}


# --------------------------------------------------------------------------- the protocol (pure)


def split_commands(buf: bytes) -> tuple[list[list[bytes]], bytes]:
    """The complete Redis commands at the start of ``buf`` (each a list of its words) and
    the bytes left over. Understands RESP arrays of bulk strings and inline commands."""
    commands: list[list[bytes]] = []
    while buf:
        parsed = _parse_one(buf)
        if parsed is None:
            break
        words, used = parsed
        commands.append(words)
        buf = buf[used:]
    return commands, buf


def _parse_one(buf: bytes) -> tuple[list[bytes], int] | None:
    end = buf.find(b"\r\n")
    if end < 0:
        return None
    if buf[:1] != b"*":  # an inline command: words on one line
        return buf[:end].split(), end + 2
    count = int(buf[1:end])
    pos = end + 2
    words = []
    for _ in range(max(count, 0)):
        line_end = buf.find(b"\r\n", pos)
        if line_end < 0 or buf[pos:pos + 1] != b"$":
            return None
        size = int(buf[pos + 1:line_end])
        start = line_end + 2
        if start + size + 2 > len(buf):
            return None
        words.append(buf[start:start + size])
        pos = start + size + 2
    return words, pos


def empty_cache_answer(words: list[bytes]) -> bytes:
    """What an empty Redis that accepts and forgets every store answers to ``words``."""
    name = words[0].upper() if words else b""
    if name == b"MGET":
        return b"*%d\r\n" % (len(words) - 1) + _NIL * (len(words) - 1)
    return _EMPTY_ANSWERS.get(name, b"+OK\r\n")


# --------------------------------------------------------------------------- the guard


@dataclass(kw_only=True)
class Outage:
    """When the shared Redis could first not be reached, why, and what the guard answered
    in its place."""

    since: float  # wall-clock time.time()
    reason: str
    lookups: int = 0  # lookups answered as misses
    stores: int = 0  # stores dropped
    recovered: bool = False  # the shared server answered again later


class RedisGuard:
    """A pass-through for one shared Redis at ``host``:``port`` that answers as an empty
    cache while that server cannot be reached. Use as a context manager; :attr:`url` is
    what the compiler cache is pointed at."""

    def __init__(self, host: str, port: int, *, connect_timeout: float = 2.0, retry_after: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        self.upstream = (host, port)
        self.connect_timeout = connect_timeout
        self.retry_after = retry_after
        self._clock = clock
        self._lock = threading.Lock()
        self._down_until = 0.0  # no connection attempt before this (monotonic)
        self._open: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.outage: Outage | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def __enter__(self) -> "RedisGuard":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        self._listener = listener
        self.port = listener.getsockname()[1]
        threading.Thread(target=self._accept, name="redis-guard", daemon=True).start()

    def stop(self) -> None:
        """Close the listener and every connection (the compiler cache is done with it)."""
        with self._lock:
            socks = [self._listener, *self._open] if self._listener else list(self._open)
            self._listener = None
            self._open.clear()
        for s in socks:
            _close(s)

    # ------------------------------------------------------------------ connections

    def _accept(self) -> None:
        while True:
            listener = self._listener
            if listener is None:
                return
            try:
                client, _ = listener.accept()
            except OSError:
                return
            self._track(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _track(self, s: socket.socket) -> None:
        with self._lock:
            self._open.add(s)

    def _forget(self, *socks: socket.socket) -> None:
        with self._lock:
            for s in socks:
                self._open.discard(s)
        for s in socks:
            _close(s)

    def _connect_upstream(self) -> socket.socket | None:
        """A connection to the shared server, or None while it is known to be down."""
        if self._clock() < self._down_until:
            return None
        try:
            up = socket.create_connection(self.upstream, timeout=self.connect_timeout)
        except OSError as exc:
            self._down_until = self._clock() + self.retry_after
            with self._lock:
                if self.outage is None:
                    self.outage = Outage(since=time.time(), reason=_reason(exc))
                else:
                    self.outage.recovered = False
            return None
        up.settimeout(None)
        if self.outage is not None:
            self.outage.recovered = True
        return up

    def _serve(self, client: socket.socket) -> None:
        up = self._connect_upstream()
        if up is None:
            self._answer_empty(client)
            return
        self._track(up)
        threading.Thread(target=_pump, args=(client, up), daemon=True).start()
        _pump(up, client)
        self._forget(client, up)

    def _answer_empty(self, client: socket.socket) -> None:
        """Answer as an empty cache until ``retry_after`` has passed, then close, so the
        client's pool opens a new connection and the shared server gets another try."""
        deadline = self._clock() + self.retry_after
        pending = b""
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                commands, pending = split_commands(pending + data)
                if commands:
                    self._count(commands)
                    client.sendall(b"".join(empty_cache_answer(c) for c in commands))
                if self._clock() >= deadline and not pending:
                    break
        except (OSError, ValueError):
            pass
        self._forget(client)

    def _count(self, commands: list[list[bytes]]) -> None:
        with self._lock:
            if self.outage is None:
                return
            for words in commands:
                name = words[0].upper() if words else b""
                if name in _LOOKUPS:
                    self.outage.lookups += 1
                elif name in _STORES:
                    self.outage.stores += 1


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _close(s: socket.socket) -> None:
    """Shut down (which also wakes a thread blocked in accept or recv), then close."""
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass


def _reason(exc: OSError) -> str:
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return "no answer to the connection"
    return exc.strerror or str(exc) or type(exc).__name__
