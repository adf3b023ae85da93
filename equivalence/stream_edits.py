"""Where the two deliveries of one request differ, by kind, place and piece: so that a candidate's differences can be
set beside the baseline's own on the same request.

Why: the stream check excuses a candidate whose stream differs from its plain answer only when the baseline's
stream of the same request differs from the baseline's plain answer in the same way: the same kind (text, token
ids, finish_reason, ids a stream leaves out), at the same positions, with the same pieces. That is the engine's
stream path on both routes (vLLM 0.32's reasoning parser with a stop string on the AR server too; llama.cpp's
reasoning parser keeping `</think>` out of a streamed chat answer's ids), not speculation. Before (issue #42) any
difference on the baseline excused any on the candidate: a baseline differing only in finish_reason excused a token
duplicated in the middle of the candidate's answer; any id gap on the baseline's stream excused any on the
candidate's, and ids skipped at one place excused the same ids skipped at another.
Environment: none.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Sequence

from spec_route_suite.routes.base import Completion

TRAILING = {"delete": "the plain answer carries one token more at its end than the stream",
            "insert": "the stream carries one token more at its end than the plain answer"}


@dataclass(frozen=True)
class Edit:
    """One stretch where the streamed delivery departs from the plain one: its `kind` ("text", "ids",
    "finish_reason", "ids left out"), difflib's `tag` (replace, delete, insert), where it lies on each side and
    the pieces there."""

    kind: str
    tag: str
    plain_at: tuple[int, int]
    stream_at: tuple[int, int]
    plain: str | tuple[int, ...]
    stream: str | tuple[int, ...]

    def describe(self, plain_length: int | None = None) -> str:
        """One line; an id one delivery has past the other's end (`plain_length`: the plain answer's ids) reads as
        such (an engine that counts a stop's token in one delivery and not the other)."""
        piece = self.plain if self.tag == "delete" else self.stream
        if self.kind == "ids" and self.tag in TRAILING and len(piece) == 1 and self.plain_at[1] == plain_length:
            return TRAILING[self.tag]
        return (f"{self.kind} {self.tag} at plain {self.plain_at[0]}..{self.plain_at[1]}, stream "
                f"{self.stream_at[0]}..{self.stream_at[1]}: plain {_short(self.plain)} vs stream {_short(self.stream)}")


Edits = tuple[Edit, ...]


def edits(kind: str, plain: Sequence, streamed: Sequence) -> Edits:
    """Every stretch where `streamed` departs from `plain`, with its place on each side and its pieces."""
    opcodes = difflib.SequenceMatcher(a=plain, b=streamed, autojunk=False).get_opcodes()
    return tuple(Edit(kind, tag, (i1, i2), (j1, j2), plain[i1:i2], streamed[j1:j2])
                 for tag, i1, i2, j1, j2 in opcodes if tag != "equal")


def answer_edits(plain: Completion, streamed: Completion, *, ids: bool) -> Edits:
    """How the streamed answer departs from the plain one: its text, its finish_reason and, with `ids` (both
    deliveries carry the engine's own ids), its token ids."""
    found = edits("text", plain.text, streamed.text)
    if plain.finish_reason != streamed.finish_reason:
        found += (Edit("finish_reason", "replace", (0, 1), (0, 1), plain.finish_reason, streamed.finish_reason),)
    if ids:
        found += edits("ids", tuple(plain.token_ids), tuple(streamed.token_ids))
    return found


def id_edits(plain: Completion, streamed: Completion) -> Edits:
    """How the stream's ids depart from the plain answer's when the texts agree (() when the texts differ: that is
    a different answer, judged as one)."""
    if plain.text != streamed.text:
        return ()
    return edits("ids", tuple(plain.token_ids), tuple(streamed.token_ids))


def left_out(plain: Completion, streamed: Completion) -> Edits:
    """Which of the plain answer's ids a stream with incomplete ids (`id_gap`) did not state, and where."""
    return edits("ids left out", tuple(plain.token_ids), tuple(streamed.stated_ids))


def describe(found: Edits, plain_length: int | None = None) -> str:
    return "; ".join(e.describe(plain_length) for e in found)


def _short(piece: str | tuple[int, ...]) -> str:
    return repr(piece[:40]) if isinstance(piece, str) else str(list(piece[:24]))
