"""A real Redis for the tests: Debian's ``redis-server`` on 127.0.0.1 at a free port, its
data in a folder of its own, stopped (and restartable at the same port) by the test."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from _support import end


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ping(port: int, timeout: float = 1.0, password: str | None = None) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall((f"AUTH {password}\r\n" if password else "").encode() + b"PING\r\n")
            answer = b""
            while answer.count(b"\r\n") < (2 if password else 1):
                chunk = s.recv(64)
                if not chunk:
                    break
                answer += chunk
            return answer.endswith(b"+PONG\r\n")
    except OSError:
        return False


class RedisServer:
    """``start()`` / ``stop()`` may be called again: the port and the data folder stay."""

    def __init__(self, data_dir: Path, port: int | None = None, password: str | None = None):
        self.program = shutil.which("redis-server")
        self.data_dir = data_dir
        self.port = port or free_port()
        self.password = password
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> "RedisServer":
        assert self.program, "redis-server is not installed (apt-get install redis-server)"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [self.program, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.data_dir),
                "--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", str(self.data_dir / "redis.log")]
        if self.password:
            argv += ["--requirepass", self.password]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not ping(self.port, 0.2, self.password):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"redis-server did not start; see {self.data_dir / 'redis.log'}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        end(self.proc)
        self.proc = None

    def command(self, *words: str) -> bytes:
        """One command's raw answer (for the tests' own checks)."""
        def encode(*ws: str) -> bytes:
            return b"*%d\r\n" % len(ws) + b"".join(b"$%d\r\n%s\r\n" % (len(w.encode()), w.encode()) for w in ws)

        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            if self.password:
                s.sendall(encode("AUTH", self.password))
                assert s.recv(64) == b"+OK\r\n"
            s.sendall(encode(*words))
            return s.recv(1 << 20)

    def keys(self) -> int:
        """How many keys the server holds."""
        answer = self.command("DBSIZE")
        return int(answer[1:].split(b"\r\n", 1)[0])
