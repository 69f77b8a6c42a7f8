"""Which acceptance model prices a prompt-lookup proposal: what the answer being written looks
like where the proposal is made (lsd_local.drafters.auto.policy).

Measured on recorded answers of Qwen2.5-Coder 1.5B (docs/auto.md, "Where a match comes
from"), two things tell lookup proposals apart before any of their tokens is scored:

- **Where the match was found.** A match in the answer being written (the model repeating
  a pattern it wrote itself: `(inventory: dict, ` of the function it typed a moment ago)
  was right at its first token 40-67 % of the time and ran 8 tokens in 0-33 %, in every set;
  a match in the prompt (the code being edited, the docstring being copied) 84-100 % and
  68-100 % in code. So matches in the answer are learned apart ("self").
- **Code or prose.** Inside a fenced code block, a copied passage goes on (code is
  re-emitted verbatim); in prose, a quoted phrase is paraphrased after a few tokens
  (summaries: runs of 12-23 tokens held 57-66 % per token, code 95-100 %). So proposals
  outside a code block are learned apart ("prose"), starting from less trust in long runs.
  An answer that writes code without a fence (a "code only" reply, a raw completion whose
  prompt opened none) is priced as prose: its own evidence takes over within a few
  proposals, at some speed, and it shares prose's long-term evidence.
- **A resumed copy or a jump.** An edited file is re-emitted as copies that break where an
  edit is and resume after it, a few tokens further on in the source; new code written
  after a copy (a function added at the end) matches short phrases anywhere in the file,
  and those continue another function's body. In code, a match in the prompt that lies
  behind the copy being read or far past it is learned apart ("jump"), so that the many
  resumptions of an edited file do not make short chance matches look safe.
- **The first copy, before it is left.** An edit comes early in an edited file's answer:
  in the name or parameters of its def line, a docstring after it, an import before it. Until
  the answer first writes a token its copy of the prompt does not have, proposals are
  learned apart ("first": the same beliefs as "lookup"); after that, resumed copies hold.
  Learned together, a process that served a few edits (or the learned file) takes the
  resumptions' 99 % for the first copy too and drafts a block of 16 or 64 into the def
  line's edit (replayed on 24 held-out code edits: remembered auto 1.18x plain, 1.23x
  apart; docs/auto.md, "The first copy").

Each model still learns per run, request family and generation (lookup_acceptance).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ...config import COPY_RUN
from .lookup_acceptance import RunAcceptanceModel

FENCE = b"```"
# Beliefs before any evidence (then learned as lookup's are): outside a code block a long
# match is a quoted phrase, paraphrased after a few tokens more often than copied on; a match
# in the answer being written is mostly the model repeating its own pattern.
PROSE_LONG_PRIOR = 0.8
SELF_PRIOR = 0.5
SELF_LONG_PRIOR = 0.9
# A match this far past the copy last read (its source position) still resumes it: what an
# edit deletes or replaces lies between (a few lines; a whole function ~100-250 tokens).
RESUME_SPAN = 320
JUMP_PRIOR = 0.5
JUMP_LONG_PRIOR = 0.9


def context_models(edges: Sequence[int], long_match: int, prose_prior: float,
                   first_priors: tuple[float, float]) -> dict[str, RunAcceptanceModel]:
    """The run models of the proposals AnswerContext tells apart from code copies: "prose"
    (short matches start from `prose_prior`, as in code), "self", "jump" and "first" (the
    answer's first copy, starting from `first_priors`: short and long runs, lookup's)."""
    return {"first": RunAcceptanceModel(edges, long_match, *first_priors),
            "prose": RunAcceptanceModel(edges, long_match, prose_prior, PROSE_LONG_PRIOR),
            "self": RunAcceptanceModel(edges, long_match, SELF_PRIOR, SELF_LONG_PRIOR),
            "jump": RunAcceptanceModel(edges, long_match, JUMP_PRIOR, JUMP_LONG_PRIOR)}


class AnswerContext:
    """The answer as the auto drafter sees it, round after round: where it starts in the
    history (the prompt's end) and whether it is inside a fenced code block, read over the
    whole history, so that a prompt that leaves a block open (a raw completion of
    "```python\ndef f(") is read as code. `token_bytes` (token id -> its text as bytes: the
    target vocabulary's) is None where the text is not known: every proposal is then priced
    as code, as before the split."""

    def __init__(self, token_bytes: Callable[[int], bytes] | None = None,
                 long_match: int = COPY_RUN) -> None:
        self.token_bytes = token_bytes
        self.long_match = long_match  # a run from which a match in the prompt is a copy
        self.start: int | None = None  # the prompt's length: where the answer starts
        # where in the prompt the copy last read continues (its last proposal's origin);
        # None before this answer's first copy
        self.copy_at: int | None = None
        # the answer's first copy of the prompt: (history length, source position) of its
        # first proposal found in the prompt inside a code block; None before it.
        # `left_first_copy` once the answer wrote a token that copy does not have
        self._first: tuple[int, int] | None = None
        self.left_first_copy = False
        self._n_history = 0
        self._read_ids = np.zeros(0, np.int32)  # the history whose text has been read
        self._fences = 0
        self._tail = b""  # the last bytes read that may begin a fence

    def begin(self, start: int | None = None) -> None:
        """A new answer, starting after `start` history tokens (the prompt's; None: at the
        history of its first proposal)."""
        self.start = start
        self.copy_at = None
        self._first, self.left_first_copy = None, False
        self._forget()

    def _forget(self) -> None:
        self._read_ids = self._read_ids[:0]
        self._fences = 0
        self._tail = b""

    def observe(self, history: np.ndarray) -> None:
        """Read what was committed since the last call (history: int32[n], every committed
        token; where begin was not told the start, the first call marks it). A history that
        is not the one read plus more (a grammar's forced tokens proposed after and then not
        kept) is read again from its start."""
        n = len(history)
        if self.start is None:
            self.start = n
        self._n_history = n
        self._check_first_copy(history)
        if self.token_bytes is None:
            return
        read = len(self._read_ids)
        if n < read or not np.array_equal(history[:read], self._read_ids):
            self._forget()
            read = 0
        if n > read:
            self._read(history[read:].tolist())
            self._read_ids = history.copy()

    def _check_first_copy(self, history: np.ndarray) -> None:
        """Compare what the answer wrote since its first copy began with that copy
        (history: int32[n]); a copy that reaches the answer's start has ended too. The
        whole stretch each time (a few µs): a grammar's forced tokens, proposed and then
        not kept, may have rewritten its end."""
        if self._first is None or self.left_first_copy:
            return
        at, origin = self._first
        written = history[at:]
        source = history[origin:min(origin + len(written), self.start or 0)]
        self.left_first_copy = not np.array_equal(written, source)  # (shorter: ended)

    def _read(self, tokens: list[int]) -> None:
        # (one text for many tokens: a prompt is read at once; a fence may be split over
        # tokens, so the last bytes read that may begin one are read again with the next)
        text = self._tail + b"".join(map(self.token_bytes, tokens))
        at = text.find(FENCE)
        while at >= 0:  # fences read left to right, as a Markdown reader does
            self._fences += 1
            text = text[at + len(FENCE):]
            at = text.find(FENCE)
        self._tail = text[-(len(FENCE) - 1):]

    @property
    def in_code(self) -> bool:
        """Inside a fenced code block (True where the text is not known)."""
        return self.token_bytes is None or self._fences % 2 == 1

    def model_for(self, source: str, origin: int) -> str:
        """The acceptance model ("first", "lookup", "self", "prose", "jump" or "suffix")
        that prices a proposal of `source` (Draft.source: "" token lookup, "text", "suffix")
        found at `origin` (Draft.origin: its position in the history, -1 = not in the
        history)."""
        if source == "suffix":
            return "suffix"
        if self.start is not None and origin >= self.start:
            return "self"
        if not self.in_code:
            return "prose"
        if origin >= 0 and self.copy_at is not None and \
                not 0 <= origin - self.copy_at <= RESUME_SPAN:
            return "jump"
        return "lookup" if self.left_first_copy else "first"

    def follow(self, origin: int, run: int) -> None:
        """A proposal found at `origin` after a run of `run` tokens was made: a copy of the
        prompt (run >= long_match) is the one being read from now on; the answer's first
        proposal found in the prompt inside a code block is its first copy (a phrase quoted
        in prose before the code, or a match in an earlier turn's prose, is none)."""
        in_prompt = origin >= 0 and (self.start is None or origin < self.start)
        if in_prompt and self._first is None and self.start is not None and self.in_code:
            self._first = (self._n_history, origin)
        if run >= self.long_match and in_prompt:
            self.copy_at = origin
