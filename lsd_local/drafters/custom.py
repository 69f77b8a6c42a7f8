"""A drafter of the library user's own (`Engine.configure(drafter=MyDrafter())`), as
llama-cpp-python takes a `draft_model` subclass: lsd calls its begin / propose / accept / end
like its own drafters', and checks every proposal before it reaches llama.cpp, since a token
id outside the vocabulary would fail the whole decode and a draft past its k could run past
the context or max_tokens."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..config import CUSTOM_DRAFTER, DrafterConfig, SamplerSettings
from ..errors import ParameterError
from .base import Draft, Drafter, DraftSteps, run_steps

# DrafterConfig("custom") named where no Drafter of the user's was given (a server request)
NONE_GIVEN = ("invalid drafter: 'custom' is a Drafter of your own, and this engine was given "
              "none (Engine.configure(drafter=MyDrafter()))")
SIDE_BY_SIDE = ("a Drafter instance serves one request at a time and this engine runs {n_seq} "
                "side by side: pass a function that makes one (drafter=MyDrafter)")


class CheckedDrafter(Drafter):
    """`inner` (the user's Drafter) with each proposal checked: integer token ids within the
    vocabulary, a 1-D array or a sequence of ints (taken as a Draft), `probs` (when given)
    float[m, n_vocab]; a longer proposal than asked for is cut to k. Everything else the
    generation calls reaches `inner` unchanged."""

    def __init__(self, inner: Drafter, n_vocab: int) -> None:
        self.inner, self.n_vocab = inner, n_vocab
        # (its name in the statistics' draft sources: the class's unless it names itself)
        named = getattr(inner, "name", Drafter.name)
        self.name = str(named) if named and named != Drafter.name else type(inner).__name__

    def begin(self, family: str | None = None, n_prompt: int | None = None) -> None:
        self.inner.begin(family, n_prompt)

    def propose(self, history: np.ndarray, k: int, sampler: SamplerSettings | None = None,
                rng: np.random.Generator | None = None, grammar=None) -> Draft:
        """history: int32[n]; the inner drafter's proposal, checked and cut to k."""
        return run_steps(self.propose_steps(history, k, sampler, rng, grammar))

    def propose_steps(self, history: np.ndarray, k: int, sampler: SamplerSettings | None = None,
                      rng: np.random.Generator | None = None, grammar=None) -> DraftSteps:
        """The inner drafter's steps (a draft model's decodes it yields), then its check. It
        sees the history read-only and the grammar as a GrammarView: the request's own."""
        seen = history.view()
        seen.flags.writeable = False
        view = None if grammar is None else GrammarView(grammar, self.n_vocab)
        proposal = yield from self.inner.propose_steps(seen, k, sampler, rng, view)
        return self.checked(proposal, k)

    def checked(self, proposal, k: int) -> Draft:
        """A Draft of at most k valid token ids from what the inner drafter returned
        (ParameterError naming the drafter otherwise)."""
        draft = proposal if isinstance(proposal, Draft) else Draft(proposal)
        tokens = as_token_array(draft.tokens, self.name)[:max(k, 0)]
        outside = np.flatnonzero((tokens < 0) | (tokens >= self.n_vocab))
        if len(outside):
            raise ParameterError(
                f"drafter {self.name!r} proposed token id {int(tokens[outside[0]])}, outside "
                f"the vocabulary (0..{self.n_vocab - 1})", param="drafter")
        probs = None if draft.probs is None else self.checked_probs(draft.probs, tokens)
        # (the fields only lsd's drafters fill: a grammar's forced tokens, lookup's run and
        # origin, which the statistics and auto read)
        return Draft(tokens.astype(np.int32), probs, str(draft.source or ""))

    def checked_probs(self, probs, tokens: np.ndarray) -> np.ndarray:
        """probs: float[m >= len(tokens), n_vocab], the distributions the tokens were sampled
        from: finite, >= 0, each row summing to 1 and giving its token a chance."""
        rows = np.asarray(probs)
        n = len(tokens)
        if rows.ndim != 2 or rows.shape[1] != self.n_vocab or len(rows) < n or \
                not np.issubdtype(rows.dtype, np.floating):
            raise ParameterError(
                f"drafter {self.name!r} gave probs of shape {rows.shape} ({rows.dtype}) for "
                f"{n} tokens: float rows [n_tokens, {self.n_vocab}] or None", param="drafter")
        rows = rows[:n].astype(np.float64)
        if not np.isfinite(rows).all() or (rows < 0).any() or \
                not np.allclose(rows.sum(axis=1), 1.0, atol=1e-3) or \
                (rows[np.arange(n), tokens] <= 0).any():
            raise ParameterError(
                f"drafter {self.name!r} gave probs that are no distributions its tokens were "
                "drawn from (each row finite, >= 0, summing to 1, its token above 0)",
                param="drafter")
        return rows

    def accept(self, n_drafted: int, n_accept: int, verify_seconds: float,
               grew_logits: bool = False) -> None:
        self.inner.accept(n_drafted, n_accept, verify_seconds, grew_logits)

    def end(self, history: np.ndarray, n_prompt: int | None = None) -> None:
        self.inner.end(history, n_prompt)

    def use_suffix_index(self, index) -> None:
        self.inner.use_suffix_index(index)

    def reset(self) -> None:
        self.inner.reset()


class GrammarView:
    """The request's grammar state as a drafter of the user's own sees it: it may ask what
    may come next (allows, mask) and advance a copy of its own (clone, then accept), never
    the request's state, and no token id outside the vocabulary reaches llama.cpp."""

    def __init__(self, grammar, n_vocab: int, own: bool = False) -> None:
        self._grammar, self.n_vocab, self._own = grammar, n_vocab, own

    def allows(self, token: int) -> bool:
        """Whether the grammar lets `token` come next (False for an id outside the vocab)."""
        token = int(token)
        return 0 <= token < self.n_vocab and self._grammar.allows(token)

    def mask(self, row: np.ndarray) -> None:
        """Set every forbidden token's logit to -inf in `row` (float[n_vocab], in place)."""
        if not isinstance(row, np.ndarray) or row.shape != (self.n_vocab,) or \
                not np.issubdtype(row.dtype, np.floating) or not row.flags.writeable:
            raise ParameterError(f"grammar.mask takes a writeable float row of {self.n_vocab} "
                                 "logits", param="drafter")
        self._grammar.mask(row)

    def clone(self) -> GrammarView:
        """A copy of this state that `accept` advances."""
        return GrammarView(self._grammar.clone(), self.n_vocab, own=True)

    def accept(self, token: int) -> None:
        """Advance a clone by an allowed token (ValueError for one the grammar forbids)."""
        if not self._own:
            raise ParameterError("the request's grammar state is lsd's: accept tokens on "
                                 "grammar.clone()", param="drafter")
        if not self.allows(token):
            raise ValueError(f"token {token} is not allowed by the grammar here")
        self._grammar.accept(int(token), checked=True)


def as_token_array(tokens, name: str) -> np.ndarray:
    """int64[m] from a 1-D array or sequence of integers (ParameterError otherwise)."""
    try:
        array = np.asarray(tokens)
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"drafter {name!r} proposed {type(tokens).__name__}: a Draft "
                             f"or a sequence of token ids ({exc})", param="drafter") from None
    if array.size == 0:
        return np.zeros(0, np.int64)
    if array.ndim != 1 or not (np.issubdtype(array.dtype, np.integer) and array.dtype != bool):
        raise ParameterError(f"drafter {name!r} proposed an array of shape {array.shape} "
                             f"({array.dtype}): a Draft or a 1-D sequence of integer token "
                             "ids", param="drafter")
    if np.issubdtype(array.dtype, np.unsignedinteger):  # (a huge one stays out of range)
        return np.minimum(array, np.uint64(1 << 62)).astype(np.int64)
    return array.astype(np.int64)


def custom_drafters(drafter: Drafter | Callable[[], Drafter], n_vocab: int,
                    n_seq: int) -> list[CheckedDrafter]:
    """One checked drafter per sequence from a Drafter (one sequence only: a drafter holds
    one request's state) or a factory called once per sequence."""
    if isinstance(drafter, Drafter):
        if n_seq > 1:
            raise ParameterError(SIDE_BY_SIDE.format(n_seq=n_seq), param="drafter")
        return [CheckedDrafter(drafter, n_vocab)]
    made: Sequence = [drafter() for _ in range(n_seq)]
    for one in made:
        if not isinstance(one, Drafter):
            raise ParameterError(f"drafter factory returned {type(one).__name__}, not a "
                                 "lsd_local.Drafter", param="drafter")
    return [CheckedDrafter(one, n_vocab) for one in made]


def is_custom(drafter) -> bool:
    """Whether Engine.load / configure's `drafter` is the user's own (a Drafter, or a function
    or class that makes one), not a name or a DrafterConfig."""
    return drafter is not None and not isinstance(drafter, str) and (
        isinstance(drafter, Drafter) or callable(drafter))


def refuse_before_loading(drafter, spec) -> None:
    """What Engine.load can refuse before it loads a model: DrafterConfig("custom") with no
    Drafter (spec: the EngineSettings it loads with), a Drafter instance side by side, and a
    Drafter of the user's own at k="auto"."""
    if not is_custom(drafter):
        if spec.drafter.drafter == CUSTOM_DRAFTER:
            raise ParameterError(NONE_GIVEN, param="drafter")
        return
    if isinstance(drafter, Drafter) and spec.load.n_seq > 1:
        raise ParameterError(SIDE_BY_SIDE.format(n_seq=spec.load.n_seq), param="drafter")
    DrafterConfig(CUSTOM_DRAFTER, k=spec.drafter.k)  # (validated: k="auto" is refused)


def given_custom(engine, drafter):
    """`engine` (just loaded) configured with the user's `drafter` at the k it was loaded
    with (Engine.load(..., drafter=MyDrafter(), k=...)); closed when that is refused."""
    try:
        engine.configure(drafter, k=engine.drafter_config.k)
    except BaseException:
        engine.close()
        raise
    return engine
