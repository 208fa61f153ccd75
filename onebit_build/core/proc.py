"""The one subprocess wrapper: find the program, echo the command, log, stream, stop cleanly."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Mapping, Sequence

from onebit_build.core import reaper, ui
from onebit_build.core.child_env import child_environ
from onebit_build.core.errors import CommandError, ToolMissingError
from onebit_build.core.fsutil import tail_lines
from onebit_build.core.reaper import die_with_parent, interrupts_held  # noqa: F401 - importable from here

# How to get a missing program, shown in the error.
INSTALL_HINTS = {
    "git": "install git: apt-get install git",
    "cmake": "pip install cmake (or apt-get install cmake)",
    "ninja": "pip install ninja (or apt-get install ninja-build)",
    "cc": "install a C compiler (Debian: apt-get install build-essential)",
    "c++": "install a C++ compiler (Debian: apt-get install build-essential)",
    "glslc": "apt-get install glslc",
    "pip": "python -m ensurepip",
}


def which(program: str) -> str:
    """Resolve ``program`` to an absolute path or raise ToolMissingError with a remedy."""
    if os.sep in program:
        if os.access(program, os.X_OK):
            return program
        found = None
    else:
        found = shutil.which(program)
    if not found:
        hint = INSTALL_HINTS.get(Path(program).name, f"install {Path(program).name}")
        raise ToolMissingError(f"{program} not found", hint=hint)
    return found


# Options whose value is a secret: a command line shown, echoed or logged carries "***" instead.
SECRET_OPTIONS = ("--api-key",)


def shown_command(args: Sequence[str]) -> str:
    """``args`` as a shell line, each secret option's value replaced by ``***``. Pure."""
    out: list[str] = []
    hide = False
    for a in args:
        name = a.split("=", 1)[0]
        if hide:
            out.append("***")
        elif name in SECRET_OPTIONS and "=" in a:
            out.append(f"{name}=***")
        else:
            out.append(a)
        hide = not hide and a in SECRET_OPTIONS
    return shlex.join(out)


@dataclass(frozen=True, kw_only=True)
class Completed:
    argv: list[str]
    returncode: int
    output: str


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_group(proc: subprocess.Popen[bytes], pgid: int, timeout: float) -> bool:
    """Wait until the leader has exited and nothing is left in its process group."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc.poll()
        if proc.returncode is not None and not _group_alive(pgid):
            return True
        time.sleep(0.05)
    proc.poll()
    return proc.returncode is not None and not _group_alive(pgid)


# Interrupt, then terminate, then kill: each signal with the seconds the group gets to exit.
STOP_STEPS: tuple[tuple[signal.Signals, float], ...] = (
    (signal.SIGINT, 5.0),
    (signal.SIGTERM, 5.0),
    (signal.SIGKILL, 5.0),
)


def stop_group(
    proc: subprocess.Popen[bytes],
    steps: Sequence[tuple[signal.Signals, float]] = STOP_STEPS,
    *,
    on_timeout: Callable[[signal.Signals, float], None] | None = None,
) -> int:
    """Send each signal of ``steps`` in turn to the child's process group, giving the whole
    group the step's grace to exit before the next one, so that a build tool can stop its
    own children. ``on_timeout(signal, grace)`` is told of each step the group outlived.
    Returns how many signals were sent (0: the group had already gone)."""
    sent = _stop_steps(proc, steps, on_timeout)
    if not _group_alive(proc.pid):
        reaper.release(proc.pid)  # else the watcher still kills it when the tool ends
    return sent


def _stop_steps(proc: subprocess.Popen[bytes], steps: Sequence[tuple[signal.Signals, float]],
                on_timeout: Callable[[signal.Signals, float], None] | None) -> int:
    pgid = proc.pid
    sent = 0
    for sig, grace in steps:
        if proc.poll() is not None and not _group_alive(pgid):
            return sent
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
        sent += 1
        if _wait_group(proc, pgid, grace):
            return sent
        if on_timeout is not None:
            on_timeout(sig, grace)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    return sent


def _popen(args: list[str], **kw) -> subprocess.Popen[bytes]:
    """Start ``args`` as every program of the tool starts: in a process group of its own that
    the tool's watcher kills if the tool dies first, and with a parent-death signal. A Ctrl-C
    that lands while it starts (the program forked but not yet on the watcher's list, or
    Popen not yet returned: in its own session, nothing else would stop it) is held until it
    is listed; then its whole group is stopped and the interrupt goes on."""
    hook = kw.pop("preexec_fn", None)

    def setup() -> None:
        die_with_parent()
        if hook is not None:
            hook()

    child = None
    held: list[int] = []
    try:
        with interrupts_held() as held:
            child = subprocess.Popen(args, start_new_session=True, preexec_fn=setup, **kw)
            reaper.own(child.pid)
    finally:
        if held:
            if child is not None:
                stop_group(child)
            raise KeyboardInterrupt
    return child


def _done(child: subprocess.Popen[bytes]) -> None:
    """The program has ended and its group was waited for or stopped: off the watcher's list."""
    reaper.release(child.pid)


def _environ(env: Mapping[str, str] | None) -> dict[str, str]:
    """This process's environment with ``env``'s entries on top, less the tool's secrets."""
    return child_environ(env)


# --------------------------------------------------------------------------- short runs

PROBE_TIMEOUT_S = 30.0


@dataclass(frozen=True, kw_only=True)
class Captured:
    """A short run's output, stdout and stderr kept apart. ``returncode`` is None when the
    program could not be started or ran past its time; ``stderr`` then says why."""

    argv: list[str]
    returncode: int | None
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def capture(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> Captured:
    """Run a short program whose output is data (a probe, a disassembly) and keep what it
    wrote. Never raises for the program: the caller decides what a failure means. Not
    echoed and not logged, unlike :func:`run`."""
    args = [os.fspath(a) for a in argv]
    try:
        child = _popen(args, cwd=cwd, env=_environ(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    except OSError as exc:
        return Captured(argv=args, returncode=None, stdout="", stderr=str(exc))
    try:
        raw_out, raw_err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        stop_group(child, ((signal.SIGKILL, 5.0),))
        return Captured(argv=args, returncode=None, stdout="", stderr=str(exc))
    except BaseException:
        stop_group(child)
        raise
    _done(child)
    out, err = (raw.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n") for raw in (raw_out, raw_err))
    return Captured(argv=args, returncode=child.returncode, stdout=out, stderr=err)  # newlines as text mode gives


def probe(
    argv: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = PROBE_TIMEOUT_S,
) -> str | None:
    """Output (stdout, else stderr) of a short command that succeeded; None when it cannot
    run, runs too long or fails."""
    done = capture(argv, env=env, timeout=timeout)
    return (done.stdout or done.stderr) if done.ok else None


def version_line(exe: str | os.PathLike[str], *, env: Mapping[str, str] | None = None) -> str | None:
    """First line of ``exe --version`` ("" when it prints nothing); None when it cannot run."""
    text = probe([exe, "--version"], env=env)
    if text is None:
        return None
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""


# --------------------------------------------------------------------------- logged runs


def _open_log(log: Path, args: list[str], cwd: Path | None) -> BinaryIO:
    """``log`` opened for appending, after a ``$ command`` line (and the folder it ran in)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    logf = open(log, "ab")
    logf.write(f"$ {shown_command(args)}\n".encode())
    if cwd:
        logf.write(f"# in {cwd}\n".encode())
    logf.flush()
    return logf


def _feed(proc: subprocess.Popen[bytes], text: str) -> None:
    """Write ``text`` to the child's stdin from a thread of its own, then close it."""
    assert proc.stdin is not None
    stdin = proc.stdin

    def write() -> None:
        try:
            stdin.write(text.encode())
            stdin.close()
        except OSError:
            pass

    threading.Thread(target=write, daemon=True).start()


def _pump(proc: subprocess.Popen[bytes], logf: BinaryIO | None, on_line: Callable[[str], None] | None,
          captured: list[str] | None, recent: list[str]) -> None:
    """Pass each output line to the log, ``captured``, ``on_line`` (or, verbose, the screen)
    and ``recent`` (the last few hundred lines, for the error when there is no log)."""
    assert proc.stdout is not None
    for raw in proc.stdout:
        if logf:
            logf.write(raw)
            logf.flush()
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if captured is not None:
            captured.append(line)
        recent.append(line)
        if len(recent) > 400:
            del recent[:200]
        if on_line:
            on_line(line)
        if ui.is_verbose() and not on_line:
            ui.detail(f"  {line}")


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    log: Path | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    on_line: Callable[[str], None] | None = None,
    capture: bool = False,
    check: bool = True,
    what: str | None = None,
    hint: str | None = None,
    input_text: str | None = None,
    tail: int = 30,
) -> Completed:
    """Run ``argv`` (no shell). Output goes to ``log`` (appended) and, line by line, to
    ``on_line``; with ``capture`` it is also returned. Raises CommandError on failure."""
    args = [os.fspath(a) for a in argv]
    args[0] = which(args[0])
    ui.detail(f"$ {shown_command([Path(args[0]).name, *args[1:]])}")
    logf = _open_log(log, args, cwd) if log is not None else None
    captured: list[str] | None = [] if capture else None
    recent: list[str] = []
    try:
        rc = _run_pumped(args, cwd=cwd, env=env, input_text=input_text, logf=logf, on_line=on_line, captured=captured,
                         recent=recent)
    finally:
        if logf:
            logf.close()
    if rc != 0 and check:
        raise CommandError(
            f"{what or Path(args[0]).name} failed with exit code {rc}" + (f"; full log: {log}" if log else ""),
            argv=args,
            returncode=rc,
            log_path=str(log) if log else None,
            tail=tail_lines(log, tail) if log else "\n".join(recent[-tail:]),
            hint=hint,
        )
    return Completed(argv=args, returncode=rc, output="\n".join(captured or []))


def _run_pumped(args: list[str], *, cwd: Path | None, env: Mapping[str, str] | None, input_text: str | None,
                logf: BinaryIO | None, on_line: Callable[[str], None] | None, captured: list[str] | None,
                recent: list[str]) -> int:
    """Start ``args`` in its own process group, pass its output on, wait; stop the group when
    anything (Ctrl-C included) interrupts. Returns the exit code."""
    proc = _popen(args, cwd=cwd, env=_environ(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                  stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL)
    if input_text is not None:
        _feed(proc, input_text)
    try:
        _pump(proc, logf, on_line, captured, recent)
        rc = proc.wait()
        _done(proc)
        return rc
    except BaseException:
        stop_group(proc)
        raise


def _log_split(log: Path, args: list[str], cwd: Path | None, out: str, err: str, rc: int) -> None:
    """Append one finished run to ``log``: the command, the folder, stdout, stderr, the exit code."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ {shown_command(args)}\n" + (f"# in {cwd}\n" if cwd else ""))
        for text in (out, err):
            if text:
                f.write(text if text.endswith("\n") else text + "\n")
        f.write(f"# exit {rc}\n")


def run_split(
    argv: Sequence[str | os.PathLike[str]],
    *,
    log: Path | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    what: str | None = None,
    hint: str | None = None,
    tail: int = 20,
) -> Captured:
    """Like :func:`run` (found first, echoed, logged, its process group stopped on Ctrl-C or
    any error, CommandError with the output's tail), for a program whose stdout is data: stdout
    and stderr come back apart. For git, whose answers are parsed from stdout."""
    args = [os.fspath(a) for a in argv]
    args[0] = which(args[0])
    shown = shown_command([Path(args[0]).name, *args[1:]])
    ui.detail(f"$ {shown}" + (f"   (in {cwd})" if cwd else ""))
    proc = _popen(args, cwd=cwd, env=_environ(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                  stderr=subprocess.PIPE)
    try:
        raw_out, raw_err = proc.communicate()
        _done(proc)
    except BaseException:
        stop_group(proc)
        raise
    out, err = raw_out.decode("utf-8", "replace"), raw_err.decode("utf-8", "replace")
    rc = proc.returncode
    if log is not None:
        _log_split(log, args, cwd, out, err, rc)
    if rc != 0 and check:
        last = "\n".join((err or out).strip().splitlines()[-tail:])
        raise CommandError(
            f"{what or shown.split()[0]} failed (exit {rc}): {last.splitlines()[-1] if last else ''}",
            argv=args, returncode=rc, log_path=str(log) if log else None, tail=last, hint=hint,
        )
    return Captured(argv=args, returncode=rc, stdout=out, stderr=err)


# --------------------------------------------------------------------------- long-running programs


def spawn(
    argv: Sequence[str | os.PathLike[str]],
    *,
    log: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    preexec_fn: Callable[[], None] | None = None,
    shown_env: Sequence[str] = (),
    given: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """Start a long-running program (a server) in its own process group and return at once.
    Its stdin is closed; its output is appended to ``log`` after a ``$ command`` line (and a
    ``# environment:`` line with the variables named in ``shown_env``, as the program gets
    them). Stop it with :func:`stop_group`. ``preexec_fn`` runs in the child before the
    program starts. It gets no secret variable of the tool's but those ``given`` by name."""
    args = [os.fspath(a) for a in argv]
    args[0] = which(args[0])
    ui.detail(f"$ {shown_command(args)}")
    full_env = child_environ(env, given=given)
    shown = " ".join(f"{k}={shlex.quote(full_env[k])}" for k in shown_env if k in full_env)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as logf:
        logf.write(f"$ {shown_command(args)}\n".encode() + (f"# environment: {shown}\n".encode() if shown else b""))
        logf.flush()
        return _popen(args, cwd=cwd, env=full_env, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                      preexec_fn=preexec_fn)
