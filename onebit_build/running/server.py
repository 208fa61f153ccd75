"""Start and stop one llama-server: a free port on 127.0.0.1, wait for /health, always stop.

The server is a service, so it is started with :func:`proc.spawn` (its own process group,
output to its log file) rather than :func:`proc.run`. Whatever happens (a failed check, an
exception, Ctrl-C) its caller stops it with :meth:`Server.stop` (:func:`proc.stop_group`): SIGTERM to its
process group, a second SIGTERM, then SIGKILL. On Linux the server is also told to die with
the process that started it.
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal, TypeVar

from onebit_build.core import proc, ui
from onebit_build.core.errors import CommandError, SmokeError
from onebit_build.core.fsutil import tail_lines
from onebit_build.running.devices import parse_list_devices
from onebit_build.running.measure import Completion
from onebit_build.running.ports import HOST, bind_error, bind_problem, client_host, free_port, port_is_free
from onebit_build.running.server_args import (
    API_KEY_VARIABLE, FIT_VARIABLE, ServerSpec, gives_alias, open_without_key, server_argv, server_env)

if TYPE_CHECKING:  # requests is imported where a server is started: not at every start of the tool
    import requests

LOG_TAIL_LINES = 30
T = TypeVar("T")
BIND_ERRORS = ("couldn't bind", "address already in use")
PORT_ATTEMPTS = 3
# How stop() ends a server: each signal with its grace, and the name stopped_by records.
SECOND_TERM_GRACE_S = 2.0
KILL_GRACE_S = 10.0
STOP_LABELS = ("SIGTERM", "second SIGTERM", "SIGKILL")


# --------------------------------------------------------------------------- pure decisions


class RequestTimeout(SmokeError):
    """A request got no answer in its time; the caller says which deadline that was."""


class AnswerError(SmokeError):
    """The server answered a request, but not with 200 and a JSON object: this request
    failed, the server still serves."""


def completion_from_reply(status: int, data: Any, *, hint: str | None = None) -> Completion:
    """The typed answer of a /completion reply; AnswerError when it is not one."""
    if status != 200 or not isinstance(data, dict):
        raise AnswerError(f"/completion answered HTTP {status}: {str(data)[:300]}", hint=hint)
    return Completion.from_json(data)


HealthState = Literal["ready", "loading", "unexpected"]


def health_state(status: int, body: Any) -> HealthState:
    """/health answers 503 while the model loads and 200 ``{"status": "ok"}`` when ready."""
    if status == 200 and isinstance(body, dict) and body.get("status") == "ok":
        return "ready"
    if status == 503:
        return "loading"
    return "unexpected"


def is_bind_failure(log_text: str) -> bool:
    low = log_text.lower()
    return any(marker in low for marker in BIND_ERRORS)


_LOG_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ [A-Z] ")
_ERROR_WORDS = ("error", "failed", "invalid", "cannot", "couldn't", "unable", "not within")


def first_error_line(log_text: str) -> str:
    """The most telling line of a log tail: the first one that reads like an error (the
    cause; later ones tend to be its consequences), without llama.cpp's time prefix."""
    ours = ("$ ", "# environment: ", "# warning: ")  # the lines written before the server's own
    lines = [_LOG_PREFIX.sub("", ln.strip()) for ln in log_text.splitlines() if ln.strip() and not ln.startswith(ours)]
    for line in lines:
        if any(w in line.lower() for w in _ERROR_WORDS):
            return line
    return lines[-1] if lines else "(the log is empty)"


# --------------------------------------------------------------------------- ports


def choose_port(preferred: int | None, host: str = HOST) -> int:
    """The preferred port when it is free on ``host``, else one the kernel picks."""
    if preferred and port_is_free(preferred, host):
        return preferred
    if preferred:
        ui.detail(f"port {preferred} is taken; choosing another")
    return free_port(host)


# --------------------------------------------------------------------------- the process


_LIVE: set["Server"] = set()


@atexit.register
def _stop_all() -> None:
    for server in list(_LIVE):
        server.stop()


class Server:
    """A started llama-server (:func:`start` waits until it is healthy); stop it with :meth:`stop`."""

    def __init__(self, spec: ServerSpec, port: int, popen: proc.subprocess.Popen[bytes], argv: list[str]):
        self.spec = spec
        self.port = port
        self.popen = popen
        self.argv = argv
        self.url = f"http://{client_host(spec.host)}:{port}"
        self.ready_s: float | None = None  # seconds from start to healthy
        self.stopped_by: str | None = None  # the last signal stop() had to send
        import requests  # here, not at the top: the commands that start no server skip its import

        self._http = requests.Session()
        self._http.trust_env = False  # never route loopback traffic through a proxy

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def log(self) -> Path:
        return self.spec.log

    def alive(self) -> bool:
        return self.popen.poll() is None

    def returncode(self) -> int | None:
        return self.popen.poll()

    def log_tail(self, n: int = LOG_TAIL_LINES) -> str:
        return tail_lines(self.spec.log, n)

    # ---- HTTP

    def get(self, path: str, *, timeout: float = 10.0) -> requests.Response:
        return self._http.get(self.url + path, timeout=timeout)

    def get_json(self, path: str, *, timeout: float = 10.0) -> tuple[int, Any]:
        r = self.get(path, timeout=timeout)
        return r.status_code, _json_or_text(r)

    def post_json(self, path: str, body: dict[str, Any], *, timeout: float = 300.0) -> tuple[int, Any]:
        r = self._http.post(self.url + path, json=body, timeout=timeout)
        return r.status_code, _json_or_text(r)

    def complete(self, prompt: str, *, n_predict: int, ignore_eos: bool = False, return_tokens: bool = False,
                 timeout: float = 300.0) -> Completion:
        """One greedy /completion without the prompt cache (see :func:`completion_body`).
        Raises RequestTimeout when no answer comes in ``timeout`` seconds, AnswerError when
        the answer is not 200 JSON, SmokeError when the request fails otherwise."""
        import requests

        body = completion_body(prompt, n_predict, ignore_eos=ignore_eos, return_tokens=return_tokens)
        try:
            status, data = self.post_json("/completion", body, timeout=timeout)
        except requests.Timeout:
            raise RequestTimeout(f"/completion gave no answer within {timeout:.0f} s") from None
        except requests.RequestException as exc:
            raise SmokeError(self._gone_message(f"/completion failed: {exc}"), detail=self.log_tail()) from None
        return completion_from_reply(status, data, hint=f"see the server log {self.log}")

    def _gone_message(self, what: str) -> str:
        rc = self.returncode()
        if rc is not None:
            return f"{what}; llama-server exited with code {rc}: {first_error_line(self.log_tail())}; log: {self.log}"
        return f"{what}; log: {self.log}"

    # ---- stopping

    def stop(self) -> int | None:
        """Stop the server and its process group; safe to call more than once; returns the
        exit code. Our HTTP connections are closed first; then SIGTERM and ``stop_timeout_s``
        of grace; then a second SIGTERM (llama-server then exits at once: its shutdown can
        hang while a request is in flight) and 2 s; then SIGKILL."""
        try:
            self._http.close()
            if self.popen.poll() is None:
                steps = ((signal.SIGTERM, self.spec.stop_timeout_s), (signal.SIGTERM, SECOND_TERM_GRACE_S),
                         (signal.SIGKILL, KILL_GRACE_S))
                outlived: list[str] = []

                def told(sig: signal.Signals, grace: float) -> None:
                    label = STOP_LABELS[len(outlived)]
                    outlived.append(label)
                    ui.detail(f"llama-server {self.popen.pid} still runs {grace:g} s after {label}")

                sent = proc.stop_group(self.popen, steps, on_timeout=told)
                if sent:
                    self.stopped_by = STOP_LABELS[sent - 1]
            # Nothing of its group may outlive it.
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.popen.wait(timeout=10.0)
        finally:
            _LIVE.discard(self)
        return self.popen.returncode


def completion_body(prompt: str, n_predict: int, *, ignore_eos: bool = False,
                    return_tokens: bool = False) -> dict[str, Any]:
    """A greedy /completion request: temperature 0, top-k 1, fixed seed, prompt cache off."""
    body: dict[str, Any] = {
        "prompt": prompt,
        "n_predict": n_predict,
        "temperature": 0.0,
        "top_k": 1,
        "seed": 0,
        "cache_prompt": False,
        "ignore_eos": ignore_eos,
        "stream": False,
    }
    if return_tokens:
        body["return_tokens"] = True
    return body


def _json_or_text(r: requests.Response) -> Any:
    try:
        return r.json()
    except ValueError:
        return r.text


def _spawn(spec: ServerSpec, port: int, *, first: bool) -> Server:
    """Start the server on ``port``; its log starts afresh on the first attempt."""
    argv = server_argv(spec, port)
    if first:
        spec.log.unlink(missing_ok=True)
    open_warning = open_without_key(spec, os.environ)
    if open_warning is not None:  # the run's record says so: its server.log has it above each start
        spec.log.parent.mkdir(parents=True, exist_ok=True)
        with open(spec.log, "a", encoding="utf-8") as f:
            f.write(f"# warning: {open_warning}\n")
    popen = proc.spawn(argv, log=spec.log, env=server_env(spec, os.environ), shown_env=(FIT_VARIABLE,),
                       given=(API_KEY_VARIABLE,))
    server = Server(spec, port, popen, argv)
    _LIVE.add(server)
    return server


def _wait_healthy(server: Server, timeout_s: float, t0: float) -> None:
    """Poll /health until 200 ``status: ok``. Raises SmokeError on an early exit or timeout
    (the caller stops the server)."""
    import requests

    deadline = t0 + timeout_s
    last = "no answer yet"
    while True:
        rc = server.returncode()
        if rc is not None:
            tail = server.log_tail()
            cause = ("it could not listen on its address and port" if is_bind_failure(tail)
                     else "a damaged model file or a bad device is the usual cause")
            raise SmokeError(
                f"llama-server exited with code {rc} before it became healthy: "
                f"{first_error_line(tail)}; log: {server.log}",
                hint=f"read the log tail below; {cause}", detail=tail,
            )
        try:
            r = server.get("/health", timeout=2.0)
            state = health_state(r.status_code, _json_or_text(r))
            last = f"HTTP {r.status_code}" + (" (loading)" if state == "loading" else "")
            if state == "ready":
                server.ready_s = time.monotonic() - t0
                return
        except requests.RequestException as exc:
            last = f"no connection ({type(exc).__name__})"
        if time.monotonic() >= deadline:
            raise SmokeError(
                f"llama-server did not become healthy within {timeout_s:g} s (last /health: {last}); "
                f"it was stopped; log: {server.log}",
                hint="raise smoke.health_timeout_s in the recipe if the model is slow to load, else read the log",
                detail=server.log_tail(),
            )
        time.sleep(0.1)


def _check_binary(spec: ServerSpec) -> None:
    binary = Path(spec.binary)
    if not binary.is_file() or not os.access(binary, os.X_OK):
        raise SmokeError(f"llama-server not found or not executable: {binary}",
                         hint="build it first with 'onebit-build build'")
    from onebit_build.evidence.floor import check_program

    check_program(binary)  # a library or symbol version this box lacks: refused before it starts


def _first_port(spec: ServerSpec) -> int:
    return spec.port if spec.fixed_port and spec.port else choose_port(spec.port, spec.host)


def _healthy(spec: ServerSpec, server: Server, t0: float) -> Server:
    """``server`` (the first attempt, started at ``t0``) once it is healthy; a port taken
    meanwhile is retried on another. On any failure the server is stopped."""
    for attempt in range(PORT_ATTEMPTS):
        try:
            _wait_healthy(server, spec.health_timeout_s, t0)
            return server
        except SmokeError:
            server.stop()
            if server.returncode() is None or not is_bind_failure(server.log_tail()):
                raise
            if spec.fixed_port:  # the user's port: named, never swapped for another
                why = bind_problem(spec.host, server.port) or OSError(0, "llama-server could not bind it")
                raise bind_error(spec.host, server.port, why) from None
            if attempt + 1 == PORT_ATTEMPTS:
                raise
            ui.detail(f"port {server.port} was taken when llama-server bound it; trying another")
        except BaseException:
            server.stop()
            raise
        t0 = time.monotonic()
        server = _spawn(spec, choose_port(None, spec.host), first=False)
    raise AssertionError("unreachable")  # pragma: no cover


def start(spec: ServerSpec) -> Server:
    """Start a server and wait until it is healthy. On any failure it is stopped and
    SmokeError says why, with the log's tail. A port taken meanwhile is retried."""
    _check_binary(spec)
    port = _first_port(spec)
    return _healthy(spec, _spawn(spec, port, first=True), time.monotonic())


def start_together(specs: list[ServerSpec]) -> list[Server | SmokeError]:
    """Start every server at once, so that their models load side by side, then wait until
    each is healthy as :func:`start` does. Per spec, in order: the server, or the SmokeError
    that says why it did not start (that one is stopped). Any other exception stops them all.
    All are started from this thread: a server dies with the thread that started it."""
    begun: list[tuple[ServerSpec, Server | SmokeError, float]] = []
    out: list[Server | SmokeError] = []
    try:
        for spec in specs:
            try:
                _check_binary(spec)
            except SmokeError as exc:
                begun.append((spec, exc, 0.0))
                continue
            port = _first_port(spec)
            begun.append((spec, _spawn(spec, port, first=True), time.monotonic()))
        for spec, server, t0 in begun:
            if isinstance(server, SmokeError):
                out.append(server)
                continue
            try:
                out.append(_healthy(spec, server, t0))
            except SmokeError as exc:
                out.append(exc)
        return out
    except BaseException:
        for one in [b[1] for b in begun] + out:
            if isinstance(one, Server):
                one.stop()
        raise


def side_by_side(calls: list[Callable[[], T]]) -> list[T | None]:
    """Each call in a thread of its own, all at the same time (requests to servers that are
    up together); their results in order, None for one that raised. Ctrl-C reaches the
    calling thread, whose caller then stops the servers, which ends the requests."""
    done: dict[int, T] = {}

    def one(i: int) -> None:
        done[i] = calls[i]()

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [done.get(i) for i in range(len(calls))]


def list_devices(binary: Path, *, env: tuple[tuple[str, str], ...] = (), log: Path) -> tuple[str, ...]:
    """The non-CPU devices ``llama-server --list-devices`` reports."""
    try:
        done = proc.run([binary, "--list-devices"], log=log, env=dict(env), capture=True,
                        what="llama-server --list-devices")
    except CommandError as exc:
        raise SmokeError(
            f"llama-server --list-devices failed with exit code {exc.returncode}; log: {log}",
            hint="check that the binary runs on this machine (missing libraries or drivers?)",
            detail=exc.tail,
        ) from None
    return parse_list_devices(done.output)


def serve_foreground(spec: ServerSpec, *, has_chat_template: bool) -> int:
    """Run one server until it exits or Ctrl-C; then stop it (its whole process group).
    Prints the OpenAI base URL, and a warning when the model has no chat template of its
    own. Returns 0 when stopped by the user, else the server's exit status."""
    if spec.port is not None:
        problem = bind_problem(spec.host, spec.port)
        if problem is not None:
            raise bind_error(spec.host, spec.port, problem)
    server = start(spec)
    try:
        open_warning = open_without_key(spec, os.environ)
        if open_warning is not None:
            ui.warn(open_warning)
        base = f"http://{client_host(spec.host)}:{server.port}/v1"
        named = f" as {spec.alias}" if spec.alias and not gives_alias(spec.extra_args) else ""
        ui.info(f"serving {spec.model.name}{named} on {spec.host}:{server.port} (pid {server.pid}, log {spec.log})")
        ui.info("Ctrl-C stops the server")
        ui.answer(f"OpenAI base URL: {base}")
        if not has_chat_template:
            ui.warn("the model has no chat template: /v1/chat/completions will answer junk; "
                    "use /v1/completions with plain text")
        while server.alive():
            time.sleep(0.5)
        ui.error(f"llama-server exited with status {server.returncode()}: {first_error_line(server.log_tail())}")
        return server.returncode() or 1
    except KeyboardInterrupt:
        ui.info("stopping llama-server")
        return 0
    finally:
        server.stop()
