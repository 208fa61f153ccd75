"""Same answers: both builds, asked the same prompt greedily on the same device, must give
the same text. When they do not, the first differing token is named, with the text both
answers share before it. Pure: answers in, a comparison out."""

from __future__ import annotations

from dataclasses import dataclass

from onebit_build.running.bench.judge import common_prefix


@dataclass(frozen=True, kw_only=True)
class Answer:
    """One greedy answer: its text and, when the server returned them, its token ids and
    the text of each token (``pieces``; empty when not known)."""

    text: str
    tokens: tuple[int, ...] = ()
    pieces: tuple[str, ...] = ()
    error: str = ""  # the request failed: why

    def piece(self, i: int) -> str | None:
        return self.pieces[i] if i < len(self.pieces) else None


@dataclass(frozen=True, kw_only=True)
class AnswerComparison:
    device: str
    prompt: str
    new: Answer
    working: Answer
    same: bool
    difference: str = ""  # for a person, when not the same

    def to_dict(self) -> dict:
        return {
            "device": self.device, "prompt": self.prompt, "same": self.same, "difference": self.difference,
            "new": {"text": self.new.text, "tokens": list(self.new.tokens), "error": self.new.error},
            "working": {"text": self.working.text, "tokens": list(self.working.tokens), "error": self.working.error},
        }


def first_differing_token(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    """Index of the first position where two token sequences differ; where one ends before
    the other, that position; None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    if len(a) != len(b):
        return min(len(a), len(b))
    return None


def _token(ans: Answer, i: int) -> str:
    if i >= len(ans.tokens):
        return "(the answer ended)"
    piece = ans.piece(i)
    return f"{piece!r} (id {ans.tokens[i]})" if piece is not None else f"id {ans.tokens[i]}"


def describe(new: Answer, working: Answer) -> str:
    """Where two differing answers part, for a person: the first differing token of each
    (by id, with its text) and the text they share before it. Falls back to characters
    when the token ids are not known."""
    if new.error or working.error:
        return "; ".join(f"{side}: {a.error}" for side, a in (("new", new), ("working", working)) if a.error)
    if new.tokens and working.tokens:
        at = first_differing_token(new.tokens, working.tokens)
        if at is not None:
            # The shared text ends at the token boundary when the pieces are known.
            pieces = new.pieces if len(new.pieces) >= at else working.pieces
            shared = "".join(pieces[:at]) if len(pieces) >= at else common_prefix(new.text, working.text)
            return f"token {at}{_after(shared)}: new {_token(new, at)}, working {_token(working, at)}"
    shared = common_prefix(new.text, working.text)
    at = len(shared)
    return f"character {at}{_after(shared)}: new {new.text[at:at + 20]!r}, working {working.text[at:at + 20]!r}"


def _after(shared: str) -> str:
    return f" after {shared[-40:]!r}" if shared else " at the start"


def compare(device: str, prompt: str, *, new: Answer, working: Answer) -> AnswerComparison:
    """Same text, and neither request failed."""
    same = not new.error and not working.error and new.text == working.text
    return AnswerComparison(device=device, prompt=prompt, new=new, working=working, same=same,
                            difference="" if same else describe(new, working))
