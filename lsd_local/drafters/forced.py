"""Tokens a grammar forces, drafted for free (SGLang's jump-forward idea, as a draft): under a
JSON schema or a tool call the grammar often admits one continuation only (keys,
punctuation, a tool's name, closing brackets). Each round, the text the grammar forces after
the committed tokens (drafters/gbnf.py) is tokenized and drafted without any model; another
drafter may go on after it in the same block. The whitespace the grammar leaves optional is
drafted as the model has been writing it (after ":" a space, after ">" a newline, ...:
learned from the committed text). Verification still decides: a wrong guess costs a
rejected draft token, never a wrong answer.
"""

from __future__ import annotations

import codecs
import contextlib
import re
from dataclasses import replace

import numpy as np

from ..utf8 import utf8_bytes
from .base import EMPTY_DRAFT, Draft, Drafter, DraftSteps, run_steps
from .crossvocab import TextCodec
from .gbnf import GrammarState, GrammarSyntaxError, parse_gbnf

# Whitespace after a character where the grammar leaves it optional: JSON as models write
# it, a newline after a tag ("<tool_call>\n{"), until the committed text says otherwise.
# After any other character the forced text stops until the model has shown its habit.
SPACING = {":": " ", ",": " ", '"': "", ">": "\n", "": ""}  # "": at the start
CHARS_PER_TOKEN = 4  # forced text looked at per draft token (then cut to the tokens asked)
# Forced tokens per round start at FIRST_CAP, double while all are kept and drop to one past
# the first rejected one: a writer whose spacing or token splits the guesses miss (a small
# or odd model) costs about one verified row per round, not a whole run of them.
FIRST_CAP = 16
MAX_CAP = 64
NO_TOKENS = np.zeros(0, np.int32)


class ForcedDraft:
    """The forced text after the committed tokens of one request. `grammar_text`, `triggers`:
    the request's GBNF and lazy trigger patterns (as backend.Grammar got them); `vocab`: the
    target's (backend.Vocab or alike: what crossvocab.TextCodec uses, and is_added)."""

    def __init__(self, grammar_text: str, triggers: tuple[str, ...], vocab) -> None:
        self._vocab = vocab
        self._codec = TextCodec(vocab)
        self._written_added: set[int] = set()  # added tokens the model wrote as one token
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.spacing = dict(SPACING)
        self._tail = ""  # the committed text from its last non-blank character on
        try:
            self._rules = parse_gbnf(grammar_text)
            start = GrammarState.start(self._rules)
        except (GrammarSyntaxError, ValueError, IndexError, RecursionError):
            # a grammar this reader does not know (llama.cpp's parser, which compiled it,
            # is more lenient: "\U00110000", deep nesting): no forced text, never an error
            self._rules, start = None, None
        self._triggers = [re.compile(pattern) for pattern in triggers]
        self._awaiting = bool(triggers) and start is not None
        self._buffer = ""  # text before a lazy grammar's trigger
        self.state = None if self._awaiting else start
        self.cap = FIRST_CAP
        self._proposed = NO_TOKENS  # the last proposal, checked against what was committed

    def advance(self, tokens: list[int]) -> None:
        """The committed tokens (end-of-generation excluded) move the state on."""
        if len(self._proposed):
            self._adjust_cap(tokens)
        self._written_added.update(t for t in tokens if self._vocab.is_added(t))
        text = "".join(self._decoder.decode(self._vocab.token_bytes_special(t)) for t in tokens)
        if not text:
            return
        self._learn(text)
        if self._awaiting:
            self._buffer += text
            text = self._triggered()
            if text is None:
                return
        if self.state is not None and not self.state.dead:
            self.state = self.state.accept(text)

    def propose(self, k: int) -> np.ndarray:
        """int32[<= k]: the forced text's tokens (none when nothing is forced)."""
        self._proposed = NO_TOKENS
        k = min(k, self.cap)
        if k <= 0 or self.state is None or self.state.dead:
            return NO_TOKENS
        text = self.state.forced(k * CHARS_PER_TOKEN, self.spacing, self._tail)
        if not text:
            return NO_TOKENS
        self._proposed = np.asarray(self._tokens(text)[:k], np.int32)
        return self._proposed

    def propose_after(self, drafted: np.ndarray, k: int) -> np.ndarray:
        """int32[<= k]: what the grammar forces after the block's draft so far (drafted
        int32[m]: forced tokens, then another drafter's), as if it were committed: a value
        copied from the prompt, then the next key's forced text, in one block. At most the
        cap: after a miss, a writer the guesses do not fit costs one row here too."""
        k = min(k, self.cap)
        if k <= 0 or self.state is None or self.state.dead or self._awaiting:
            return NO_TOKENS
        data = b"".join(self._vocab.token_bytes_special(int(t)) for t in drafted)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:  # (a character cut in two: not now)
            return NO_TOKENS
        state = self.state.accept(text)
        if state.dead:
            return NO_TOKENS
        forced = state.forced(k * CHARS_PER_TOKEN, self.spacing, self._tail + text)
        return np.asarray(self._tokens(forced)[:k], np.int32) if forced else NO_TOKENS

    def _adjust_cap(self, committed: list[int]) -> None:
        kept = 0
        for proposed, token in zip(self._proposed, committed, strict=False):
            if proposed != token:
                break
            kept += 1
        if kept == len(self._proposed):
            self.cap = min(2 * self.cap, MAX_CAP)
        elif kept < len(committed):  # (not cut short by the end of the answer)
            self.cap = kept + 1
        self._proposed = NO_TOKENS

    def _tokens(self, text: str) -> list[int]:
        """The text's tokens, up to an added token ("<tool_call>") this model has not yet
        written as one: small models often spell it out ("<", "tool", "_call", ">"); which
        way it writes it shows in the committed text after the round."""
        tokens = self._codec.exact(utf8_bytes(text)) or []  # (SentencePiece's added space: not)
        for at, token in enumerate(tokens):
            if token not in self._written_added and self._vocab.is_added(token):
                return tokens[:at]
        return tokens

    def _triggered(self) -> str | None:
        """The text from a trigger's match on (the grammar starts there), or None."""
        for pattern in self._triggers:
            found = pattern.search(self._buffer)
            if found:
                start = found.start(1) if found.groups() and found.group(1) is not None \
                    else found.start()
                text, self._buffer, self._awaiting = self._buffer[start:], "", False
                self.state = GrammarState.start(self._rules)
                return text
        return None

    def _learn(self, text: str) -> None:
        """What whitespace (maybe none) follows each character in the committed text (a run
        at the very end may go on: it is learned once something follows it)."""
        text = self._tail + text
        for found in _FOLLOWED.finditer(text):
            self.spacing[found.group(1)] = found.group(2)
        solid = text.rstrip(" \t\r\n")
        self._tail = text[len(solid) - 1:] if solid else text[-MAX_TAIL:]


_FOLLOWED = re.compile(r"([^ \t\r\n])([ \t\r\n]*)(?=[^ \t\r\n])")
MAX_TAIL = 64  # blanks kept after the last character (a longer run is not a habit)


class Forced(Drafter):
    """Any drafter (or none) with the grammar's forced tokens around its draft, so that the
    round sees one drafter: the forced text first (free), then `inner`'s tokens from there,
    then what the grammar forces after those (a value copied from the prompt, then the next
    key). The draft says how many of its tokens were forced first and last (Draft.forced_head,
    forced_tail: the statistics credit them to "forced"); `inner` hears only its own tokens'
    verdict, the forced ones counted as other tokens of the same decode (batch_tokens) that
    it does not pay for (batch_free: they are verified whatever it drafts).
    `forced`: the request's ForcedDraft, which follows the committed tokens (read from the
    history at each proposal)."""

    name = "forced"

    def __init__(self, inner: Drafter | None, forced: ForcedDraft, n_prompt: int) -> None:
        self.inner = inner
        self.forced = forced
        self._seen = n_prompt  # history length the forced state has followed (the answer's
        # tokens are what it follows: it starts after the prompt)
        self._split = (0, 0)  # the last draft's forced head and tail

    def begin(self, family: str | None = None, n_prompt: int | None = None) -> None:
        if self.inner is not None:
            self.inner.begin(family, n_prompt)

    def propose(self, history: np.ndarray, k: int, sampler=None, rng=None,
                grammar=None) -> Draft:
        return run_steps(self.propose_steps(history, k, sampler, rng, grammar))

    def propose_steps(self, history: np.ndarray, k: int, sampler=None, rng=None,
                      grammar=None) -> DraftSteps:
        self._follow(history)
        head = self.forced.propose(k)
        more = EMPTY_DRAFT
        if self.inner is not None and k > len(head):
            # (the grammar state is before the forced tokens: the block checks them)
            with _beside(self, self.inner, len(head)):
                more = yield from self.inner.propose_steps(
                    np.concatenate([history, head]) if len(head) else history,
                    k - len(head), sampler, rng, None if len(head) else grammar)
        tail = NO_TOKENS
        if len(more):
            tail = self.forced.propose_after(np.concatenate([head, more.tokens]),
                                             k - len(head) - len(more))
        self._split = (len(head), len(tail))
        if not len(head) and not len(tail):  # (the drafter's own, named as its own)
            return replace(more, source=more.source or self.inner.name) if len(more) else more
        return _joined(head, more, tail, self.inner)

    def _follow(self, history: np.ndarray) -> None:
        """Move the forced state over the tokens committed since the last proposal."""
        if len(history) > self._seen:
            self.forced.advance(history[self._seen:].tolist())
        self._seen = len(history)

    def accept(self, n_drafted: int, n_accept: int, verify_seconds: float,
               grew_logits: bool = False) -> None:
        """The drafter hears its own tokens' verdict; when a forced token before them was
        rejected, they were never judged (it hears only what the decode cost)."""
        head, tail = self._split if n_drafted else (0, 0)  # (no draft: propose was not asked)
        self._split = (0, 0)
        if self.inner is None:
            return
        n_own = n_drafted - head - tail
        with _beside(self, self.inner, head + tail):
            if n_own <= 0 or n_accept < head:
                self.inner.accept(0, 0, verify_seconds, grew_logits)
            else:
                self.inner.accept(n_own, min(n_accept - head, n_own), verify_seconds,
                                  grew_logits)

    def end(self, history: np.ndarray, n_prompt: int | None = None) -> None:
        if self.inner is not None:
            self.inner.end(history, n_prompt)

    def reset(self) -> None:
        if self.inner is not None:
            self.inner.reset()


@contextlib.contextmanager
def _beside(outer: Drafter, drafter: Drafter, n_forced: int):
    """For one call, the drafter counts what `outer` counts in the decode (side by side, the
    other requests' tokens and what they commit) and `n_forced` forced tokens it does not pay
    for; then what it counted before (it is the pool's, kept for later requests that have no
    grammar)."""
    before = drafter.batch_tokens, drafter.batch_yield, drafter.batch_free
    drafter.batch_tokens = outer.batch_tokens + n_forced
    drafter.batch_yield = outer.batch_yield
    drafter.batch_free = outer.batch_free + n_forced
    try:
        yield
    finally:
        drafter.batch_tokens, drafter.batch_yield, drafter.batch_free = before


def _joined(head: np.ndarray, more: Draft, tail: np.ndarray, inner: Drafter | None) -> Draft:
    """One draft of the forced head, the drafter's tokens and the forced tail."""
    tokens = np.concatenate([head, more.tokens, tail]).astype(np.int32)
    probs = None
    if more.probs is not None:  # a sampled draft: the grammar's tokens are certain (one-hot)
        probs = np.zeros((len(tokens), more.probs.shape[1]), more.probs.dtype)
        grammar_rows = np.r_[0:len(head), len(head) + len(more):len(tokens)]
        probs[grammar_rows, tokens[grammar_rows]] = 1.0
        probs[len(head):len(head) + len(more)] = more.probs
    source = more.source or inner.name if len(more) else "forced"
    return Draft(tokens, probs, source, more.run, len(head), len(tail))
