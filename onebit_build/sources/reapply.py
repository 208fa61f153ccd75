"""A patch series re-applied to a new commit, three-way where it must be, each patch judged.

For a pin move: in a scratch repository holding the old and the new commit, the series is
first applied to the old commit as the patch stage does (so that every blob a patch's
``index`` line names is there for a three-way merge), then to the new commit one patch at a
time. Each patch gets one of five outcomes:

- applies: as it is, every hunk where it was;
- applies with offset: as it is, some hunks some lines away (``git apply`` says which);
- applied three-way: only a three-way merge (``git am -3``) applies it; the series to build
  gets the patch written again from the merged commit;
- now empty: the new commit already holds the change (it applies in reverse, or the merge
  leaves nothing to commit): proposed for removal, left out of the series to build;
- conflicts: no way applies it; the files and hunks that fail are named. The patches after it
  are still tried (without it), so that one run shows the state of the whole series.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from onebit_build.sources.patch import PatchFile
from onebit_build.core.gitops import FIXED_IDENTITY, Git

APPLIES = "applies"
OFFSET = "applies with offset"
THREE_WAY = "applied three-way"
EMPTY = "now empty: upstream has it, proposed for removal"
CONFLICTS = "conflicts"


@dataclass(frozen=True, kw_only=True)
class Hunk:
    file: str
    number: int  # 1-based among the file's hunks
    of: int  # how many hunks the patch has for the file
    old_start: int
    header: str  # the '@@ -a,b +c,d @@ context' line

    def label(self) -> str:
        return f"{self.file} hunk {self.number}/{self.of} ({self.header})"


def patch_hunks(text: str) -> list[Hunk]:
    """Every hunk of a patch (mail or plain diff), in order, with its file. Pure."""
    found: list[tuple[str, int, str]] = []
    current = ""
    for line in text.splitlines():
        m = re.match(r"^diff --git a/(\S+) b/(\S+)", line)
        if m:
            current = m.group(2)
            continue
        if line.startswith("+++ ") and not current:
            current = line[4:].strip().removeprefix("b/")
        h = re.match(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@", line)
        if h and current:
            found.append((current, int(h.group(1)), line.strip()))
    counts: dict[str, int] = {}
    for f, _, _ in found:
        counts[f] = counts.get(f, 0) + 1
    out, seen = [], {}
    for f, start, header in found:
        seen[f] = seen.get(f, 0) + 1
        out.append(Hunk(file=f, number=seen[f], of=counts[f], old_start=start, header=header))
    return out


def failing_hunks(git_err: str, hunks: list[Hunk]) -> list[str]:
    """The hunks git named in 'patch failed: FILE:LINE' (LINE is the hunk's old start), and
    the files it could not find. Pure."""
    named: list[str] = []
    for line in git_err.splitlines():
        m = re.search(r"patch failed: (.+):(\d+)$", line.strip())
        if m:
            hit = next((h for h in hunks if h.file == m.group(1) and h.old_start == int(m.group(2))), None)
            named.append(hit.label() if hit else f"{m.group(1)} at line {m.group(2)}")
            continue
        m = re.search(r"error: (.+): (does not exist in index|No such file or directory|does not exist)", line)
        if m:
            named.append(f"{m.group(1)} (not in the new commit)")
    return list(dict.fromkeys(named))


def offsets(git_err: str) -> list[str]:
    """The hunks ``git apply -v`` placed elsewhere: ``FILE hunk N: +K lines``. Pure."""
    out, current = [], ""
    for line in git_err.splitlines():
        m = re.match(r"Checking patch (.+)\.\.\.$", line.strip())
        if m:
            current = m.group(1)
        m = re.match(r"Hunk #(\d+) succeeded at \d+ \(offset (-?\d+) lines?\)", line.strip())
        if m:
            out.append(f"{current} hunk {m.group(1)}: {int(m.group(2)):+d} lines")
    return out


@dataclass(frozen=True, kw_only=True)
class PatchOutcome:
    source: str
    patch: str
    status: str  # APPLIES, OFFSET, THREE_WAY, EMPTY or CONFLICTS
    detail: tuple[str, ...] = ()  # the offsets, or the failing files and hunks

    @property
    def ok(self) -> bool:
        return self.status != CONFLICTS

    def to_dict(self) -> dict[str, object]:
        return {"source": self.source, "patch": self.patch, "status": self.status, "detail": list(self.detail)}


@dataclass(frozen=True, kw_only=True)
class ReapplyRequest:
    source: str
    bare_repo: Path  # holds both commits
    old: str
    new: str
    patches: tuple[PatchFile, ...]
    work: Path  # a scratch folder (emptied first)
    log: Path | None = None


@dataclass(frozen=True, kw_only=True)
class Reapplied:
    source: str
    outcomes: tuple[PatchOutcome, ...]
    changed: dict[str, bytes | None] = field(default_factory=dict)  # patch name -> new bytes, None: left out
    note: str = ""  # e.g. that the series did not apply to the old commit either

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes)


def _file(p: PatchFile) -> str:
    """The patch's path as git, run in the scratch repository, must be given it."""
    return str(p.path.resolve())


def _is_mail(data: bytes) -> bool:
    return data.startswith(b"From ") or b"\nSubject: " in data[:2000]


def _apply(g: Git, p: PatchFile, *, three_way: bool) -> tuple[bool, str]:
    """Apply and commit ``p`` as the patch stage does (``three_way``: with a merge). Returns
    whether it applied and git's complaint; a failed attempt leaves the tree as it was."""
    env = dict(FIXED_IDENTITY)
    if _is_mail(p.path.read_bytes()):
        r = g.run("am", "-q", "--keep-cr", "-3" if three_way else "--no-3way", _file(p), env=env, check=False)
        if r.status != 0:
            g.run("am", "--abort", env=env, check=False)  # git asks for an identity here too
        return r.status == 0, r.err + r.out
    r = g.run("apply", "--index", *(["-3"] if three_way else []), _file(p), check=False)
    if r.status != 0:
        g.run("reset", "-q", "--hard", "HEAD", check=False)
        return False, r.err
    env2 = {**env, "GIT_AUTHOR_DATE": env["GIT_COMMITTER_DATE"]}
    g.run("commit", "-q", "--no-verify", "--allow-empty", "-m", p.name.removesuffix(".patch"), env=env2)
    return True, ""


def _conflicted(g: Git, p: PatchFile) -> list[str]:
    """The files a three-way merge of ``p`` leaves in conflict (the attempt is undone)."""
    env = dict(FIXED_IDENTITY)
    if _is_mail(p.path.read_bytes()):
        g.run("am", "-q", "--keep-cr", "-3", _file(p), env=env, check=False)
        files = g.out("diff", "--name-only", "--diff-filter=U", check=False).split()
        g.run("am", "--abort", env=env, check=False)  # git asks for an identity here too
    else:
        g.run("apply", "--index", "-3", _file(p), check=False)
        files = g.out("diff", "--name-only", "--diff-filter=U", check=False).split()
        g.run("reset", "-q", "--hard", "HEAD", check=False)
    return files


def judge_one(g: Git, p: PatchFile, source: str) -> tuple[PatchOutcome, bytes | None]:
    """Apply one patch to the tree's HEAD the gentlest way that works; its outcome, and its
    bytes written again when only a three-way merge applied it."""
    def outcome(status: str, *detail: str) -> PatchOutcome:
        return PatchOutcome(source=source, patch=p.name, status=status, detail=tuple(detail))

    check = g.run("apply", "--check", "-v", _file(p), check=False)
    if check.status == 0 and _apply(g, p, three_way=False)[0]:
        moved = offsets(check.err)
        return outcome(OFFSET if moved else APPLIES, *moved), None
    if g.run("apply", "--check", "--reverse", _file(p), check=False).status == 0:
        return outcome(EMPTY, "the new commit holds its change"), None
    hunks = failing_hunks(check.err, patch_hunks(p.path.read_text(errors="replace")))
    before = g.out("rev-parse", "HEAD")
    if _apply(g, p, three_way=True)[0]:
        if g.out("rev-parse", "HEAD") == before or g.run("diff", "--quiet", "HEAD~1", "HEAD", check=False).status == 0:
            g.run("reset", "-q", "--hard", before)
            return outcome(EMPTY, "the three-way merge leaves no change"), None
        again = g.run("format-patch", "-1", "--stdout", "--zero-commit", "--no-signature", "--no-stat", "-N",
                      "HEAD").out.encode()
        return outcome(THREE_WAY, *hunks), again
    files = _conflicted(g, p)
    detail = list(hunks)
    detail += [f"{f}: in conflict after the three-way merge" for f in files]
    if not files:
        detail.append("no three-way merge: the blobs the patch names are in neither commit")
    return outcome(CONFLICTS, *detail), None


def reapply(req: ReapplyRequest) -> Reapplied:
    """Judge every patch of ``req.patches`` on ``req.new`` (see the module's docstring). The
    scratch repository (a whole checkout) is removed again afterwards."""
    shutil.rmtree(req.work, ignore_errors=True)
    req.work.mkdir(parents=True)
    try:
        return _judge_series(Git(req.work, log=req.log), req)
    finally:
        shutil.rmtree(req.work, ignore_errors=True)


def _judge_series(g: Git, req: ReapplyRequest) -> Reapplied:
    g.run("init", "-q", ".")
    g.run("config", "core.autocrlf", "false")
    for commit in dict.fromkeys((req.old, req.new)):
        g.run("fetch", "-q", "--no-tags", "--depth=1", str(req.bare_repo), commit, what=f"fetch of {commit[:12]}")
    g.run("checkout", "-q", "--detach", req.old)
    note = ""
    for p in req.patches:  # the old series first: the blobs a three-way merge needs
        if not _apply(g, p, three_way=False)[0]:
            note = f"the series does not apply to the old commit {req.old[:12]} either (from {p.name} on)"
            break
    g.run("checkout", "-q", "--force", "--detach", req.new)
    outcomes, changed = [], {}
    for p in req.patches:
        outcome, again = judge_one(g, p, req.source)
        outcomes.append(outcome)
        if outcome.status == THREE_WAY:
            changed[p.name] = again
        elif outcome.status == EMPTY:
            changed[p.name] = None
    first_bad = next((i for i, o in enumerate(outcomes) if not o.ok), len(outcomes))
    if first_bad < len(outcomes) - 1:
        note = "; ".join(filter(None, [note, f"the patches after {outcomes[first_bad].patch} were tried without it"]))
    return Reapplied(source=req.source, outcomes=tuple(outcomes), changed=changed, note=note)
