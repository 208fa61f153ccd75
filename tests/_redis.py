"""A real Redis for the tests: Debian's ``redis-server`` on 127.0.0.1 at a free port, its
data in a folder of its own, stopped (and restartable at the same port) by the test."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ping(port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """``start()`` / ``stop()`` may be called again: the port and the data folder stay."""

    def __init__(self, data_dir: Path, port: int | None = None):
        self.program = shutil.which("redis-server")
        self.data_dir = data_dir
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> "RedisServer":
        assert self.program, "redis-server is not installed (apt-get install redis-server)"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [self.program, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.data_dir),
                "--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", str(self.data_dir / "redis.log")]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not ping(self.port, 0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"redis-server did not start; see {self.data_dir / 'redis.log'}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def command(self, *words: str) -> bytes:
        """One command's raw answer (for the tests' own checks)."""
        payload = b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w.encode()), w.encode()) for w in words)
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(payload)
            return s.recv(1 << 20)

    def keys(self) -> int:
        """How many keys the server holds."""
        answer = self.command("DBSIZE")
        return int(answer[1:].split(b"\r\n", 1)[0])
