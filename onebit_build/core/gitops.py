"""Git, through GitPython's command layer, confined to one directory and logged.

Every call is echoed with -v, appended to the stage's log and turned into a typed error
that carries git's own message. GitPython is imported only once git itself has been found:
its import fails when git is missing, and that must be one line, not a traceback.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from onebit_build.core import ui
from onebit_build.core.errors import CommandError, ToolMissingError
from onebit_build.core.proc import INSTALL_HINTS, which

# A fixed identity and date, so that applying the same patches to the same commit
# always yields the same commit SHAs.
FIXED_IDENTITY = {
    "GIT_AUTHOR_NAME": "onebit-build",
    "GIT_AUTHOR_EMAIL": "onebit-build@localhost",
    "GIT_COMMITTER_NAME": "onebit-build",
    "GIT_COMMITTER_EMAIL": "onebit-build@localhost",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}


@dataclass(frozen=True, kw_only=True)
class GitResult:
    status: int
    out: str
    err: str


class Git:
    """Run git in ``where`` (a work tree or a bare repository), never above it."""

    def __init__(self, where: Path, *, log: Path | None = None, bare: bool = False):
        self.where = Path(where)
        self.log = log
        self.bare = bare
        self._exe = which("git")
        self._cmd = _command_layer(self.where)

    def _env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        env = {
            # Never discover a repository above the one we mean.
            "GIT_CEILING_DIRECTORIES": str(self.where.parent),
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": "true",
            "GIT_CONFIG_NOSYSTEM": "1",
            "LC_ALL": "C",
        }
        if self.bare:
            env["GIT_DIR"] = str(self.where)
        if extra:
            env.update(extra)
        return env

    def run(self, *args: str, env: Mapping[str, str] | None = None, check: bool = True, what: str | None = None, hint: str | None = None) -> GitResult:
        from git.exc import GitCommandError, GitCommandNotFound

        argv = ["git", *args]
        ui.detail(f"$ {shlex.join(argv)}   (in {self.where})")
        full_env = self._env(env)
        try:
            status, out, err = self._cmd.execute(
                [self._exe, *args],
                env=full_env,
                with_extended_output=True,
                with_exceptions=False,
                strip_newline_in_stdout=False,
            )
        except GitCommandNotFound:
            raise ToolMissingError("git not found", hint=INSTALL_HINTS["git"]) from None
        except GitCommandError as exc:  # pragma: no cover - with_exceptions=False
            status, out, err = exc.status if isinstance(exc.status, int) else 1, "", str(exc.stderr)
        if self.log is not None:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log, "a", encoding="utf-8") as f:
                f.write(f"$ {shlex.join(argv)}   # in {self.where}\n")
                if out:
                    f.write(out if out.endswith("\n") else out + "\n")
                if err:
                    f.write(err if err.endswith("\n") else err + "\n")
                f.write(f"# exit {status}\n")
        if status != 0 and check:
            tail = "\n".join((err or out).strip().splitlines()[-20:])
            raise CommandError(
                f"{what or 'git ' + args[0]} failed (exit {status}): {tail.splitlines()[-1] if tail else ''}",
                argv=argv, returncode=status, log_path=str(self.log) if self.log else None, tail=tail, hint=hint,
            )
        return GitResult(status=status, out=out, err=err)

    def out(self, *args: str, **kw: object) -> str:
        return self.run(*args, **kw).out.strip()  # type: ignore[arg-type]

    def has_commit(self, sha: str) -> bool:
        res = self.run("cat-file", "-t", sha, check=False)
        return res.status == 0 and res.out.strip() == "commit"


def _command_layer(where: Path) -> Any:
    """GitPython's command runner for ``where`` (git is known to be on PATH by now)."""
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
    import git as gitpython

    return gitpython.Git(str(where))


def init_bare(path: Path, *, log: Path | None = None) -> Git:
    path.mkdir(parents=True, exist_ok=True)
    g = Git(path, log=log, bare=True)
    if not (path / "HEAD").exists():
        g.run("init", "--bare", "-q", str(path))
    return g
