"""Git, confined to one directory, run through the one process runner (``proc.run_split``).

Every call is found first, echoed with -v, appended to the stage's log, stopped with its
process group on Ctrl-C, and turned into a typed error that carries git's own message.

No git library: GitPython's ``Git.execute`` was a second process runner (its own echo, log
and error, and no process-group stop), its default object database keeps a ``git cat-file``
process of its own, and its pure-Python one is deprecated by GitPython for security reasons.
The tool's only repository query, "is this commit in the store", is one ``git cat-file``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from onebit_build.core.proc import run_split, which

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

    def run(self, *args: str, env: Mapping[str, str] | None = None, check: bool = True, what: str | None = None,
            hint: str | None = None) -> GitResult:
        done = run_split([self._exe, *args], log=self.log, cwd=self.where, env=self._env(env), check=check,
                         what=what or f"git {args[0]}", hint=hint)
        assert done.returncode is not None  # run_split raises when the program cannot start
        return GitResult(status=done.returncode, out=done.stdout, err=done.stderr)

    def out(self, *args: str, **kw: object) -> str:
        return self.run(*args, **kw).out.strip()  # type: ignore[arg-type]

    def has_commit(self, sha: str) -> bool:
        """Whether the store holds commit ``sha`` (a full or abbreviated SHA)."""
        res = self.run("cat-file", "-t", sha, check=False)
        return res.status == 0 and res.out.strip() == "commit"


def init_bare(path: Path, *, log: Path | None = None) -> Git:
    path.mkdir(parents=True, exist_ok=True)
    g = Git(path, log=log, bare=True)
    if not (path / "HEAD").exists():
        g.run("init", "--bare", "-q", str(path))
    return g
