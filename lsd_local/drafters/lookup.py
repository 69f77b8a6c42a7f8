"""Prompt lookup decoding (Saxena 2023): propose what followed an earlier occurrence of the
last n tokens, trying n = max_ngram down to min_ngram; of several, the one whose copy has run
longest (the most recent among equals), and say how long (the auto drafter learns by it)."""

from __future__ import annotations

import numpy as np

from ..config import COPY_RUN, MAX_NGRAM, MIN_NGRAM, SamplerSettings
from ..errors import check
from ..kernels.lookup import lookup_any
from ..verify.constrain import allowed_prefix
from .base import EMPTY_DRAFT, Draft, Drafter, through_stop
from .rename import RenameWatch

TEXT_BYTES_PER_RUN = 4  # a text match's length in bytes -> a run in tokens, roughly


def covers(own: np.ndarray, found: np.ndarray) -> bool:
    """Whether the context's own proposal (int32[m]) says all that past requests' (int32[n])
    does: at least as long and the same tokens. Then the context's is taken: the same copy
    found in this conversation is priced as one (the auto drafter trusts a copy in the
    context more than one in past requests) and its position is known
    (drafters/auto/context.py)."""
    return len(own) >= len(found) > 0 and np.array_equal(own[:len(found)], found)


class LookupDrafter(Drafter):
    """Drafts from the context itself; no model, no probabilities (p_d is one-hot)."""

    name = "lookup"

    def __init__(self, max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM,
                 index=None, text=None, is_stop=None) -> None:
        check(max_ngram >= 1, "max_ngram", f"{max_ngram} (must be >= 1)")
        check(1 <= min_ngram <= max_ngram, "min_ngram", f"{min_ngram} (must be 1..max_ngram)")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.index = index  # suffixstore.SuffixIndex over past requests, or None
        self.text = text  # textlookup.TextLookup (where no token n-gram matches), or None
        # token id -> whether it ends the generation (the target vocabulary's is_eog), or None
        self.is_stop = is_stop
        self.n_prompt: int | None = None  # the request's prompt length (begin), if told
        self.renames = RenameWatch()  # the answer's renames, spelled into copies (with text)
        self._out = np.zeros(64, np.int32)

    def propose(self, history: np.ndarray, k: int, sampler: SamplerSettings | None = None,
                rng: np.random.Generator | None = None, grammar=None) -> Draft:
        if k <= 0:
            return EMPTY_DRAFT
        if len(self._out) < k:
            self._out = np.zeros(k, np.int32)
        m, _, run, origin = lookup_any(history, self.max_ngram, self.min_ngram, k, self._out)
        tokens, source, renamed_at = self._out[:m], "", -1
        if self.text is not None and self.n_prompt is not None and 0 <= origin < self.n_prompt:
            tokens, renamed_at = self._renamed(history, tokens, run, origin)
        if self.index is not None and not self._copies_answer(len(history), run):
            # past requests: taken when their match runs longer and says something else
            found, found_run = self.index.find(history, k, self.min_ngram)
            if len(found) and found_run > run and not covers(tokens, found):
                tokens, run, source, origin, renamed_at = found, found_run, "suffix", -1, -1
        if not len(tokens) and self.text is not None:  # the same text as other tokens?
            tokens, size = self.text.find(history, k)
            run, source, origin = size // TEXT_BYTES_PER_RUN, "text", -1
        m = len(tokens)
        if self.is_stop is not None and m:  # (what follows an end is never committed)
            m = through_stop(tokens, self.is_stop)
        if grammar is not None and m:  # a shorter block costs less to verify
            m = allowed_prefix(grammar, tokens[:m])
        return Draft(tokens[:m].copy(), run=run, source=source, origin=origin,
                     renamed_at=renamed_at if renamed_at < m else -1)

    def _renamed(self, history: np.ndarray, tokens: np.ndarray, run: int,
                 origin: int) -> tuple[np.ndarray, int]:
        """A proposal found in the prompt, with the answer's renames spelled in: read
        where its copied stretch starts, applied to what it proposes (drafters/rename.py);
        tokens: int32[m] -> (int32[<= m], its first renamed token's index or -1)."""
        codec = self.text.codec
        self.renames.observe(history, self.n_prompt, origin, run, codec)
        return self.renames.apply(history, tokens, codec, origin, self.n_prompt)

    def begin(self, family: str | None = None, n_prompt: int | None = None) -> None:
        self.n_prompt = n_prompt
        self.renames.begin()

    def _copies_answer(self, n_history: int, run: int) -> bool:
        """Whether the context's match is a copy that the whole answer so far is part of (a
        file re-emitted from the prompt). Then it is kept over a longer match in past
        requests: the answer that wrote the file's last version is in the index too, and its
        match runs longer only because it takes in the chat template's header and that
        prompt's end; it goes on with that version where the prompt's may have changed. (An
        answer asked for again that quotes its prompt midway has a copy that started within
        the answer: there the earlier answer knows better.)"""
        return run >= COPY_RUN and self.n_prompt is not None and \
            n_history - run <= self.n_prompt

    def end(self, history: np.ndarray, n_prompt: int | None = None) -> None:
        """Keep the request's answer (with its prompt's end) in the suffix index."""
        if self.index is not None and n_prompt is not None:
            self.index.add_request(history, n_prompt)

    def use_suffix_index(self, index) -> None:
        self.index = index
