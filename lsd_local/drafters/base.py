"""What every drafter returns and the life cycle the engine and the round loop drive
(as llama.cpp's common_speculative: begin / draft / accept).

A proposal can also be made in steps (`Drafter.propose_steps`): a generator that yields each
decode of the draft model it needs (a DecodeCall) and is sent that decode's logits rows. Alone,
`run_steps` decodes each call at once; side by side (sidebyside.py), the calls of every
sequence's drafter go into one batch of the draft model, as llama-server drafts for all its
slots in one batch, instead of one sequence after the other.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator
from dataclasses import dataclass

import numpy as np

from ..config import SamplerSettings


@dataclass(frozen=True)
class Draft:
    """Proposed tokens and, for a sampled draft model, the distributions they came from."""

    tokens: np.ndarray  # int32[k]
    probs: np.ndarray | None = None  # float64[k, V]: p_d rows; None = one-hot (greedy/lookup)
    source: str = ""  # which drafter made it, when a drafter delegates (auto); "" = the drafter
    # prompt lookup: how long the copy behind the proposal has run (the matched n-gram
    # extended backwards while the text before it equals the text before its source, up to
    # RUN_CAP); the auto drafter learns acceptance by it. 0 for other drafters.
    run: int = 0
    # tokens a grammar forced (drafters/forced.py): the first forced_head and the last
    # forced_tail are the grammar's, the rest the drafter's (the statistics count them apart)
    forced_head: int = 0
    forced_tail: int = 0
    # prompt lookup: where in the history the proposed tokens were found (their first one's
    # position), so that a match in the answer being written is told from one in the prompt;
    # -1 for other sources (the suffix index of past requests, text lookup, models)
    origin: int = -1
    # prompt lookup: the first token a rename the answer made changed (drafters/rename.py):
    # the proposal is the prompt's up to there; -1 = none
    renamed_at: int = -1

    def __len__(self) -> int:
        return len(self.tokens)


EMPTY_DRAFT = Draft(np.zeros(0, np.int32))


@dataclass(frozen=True)
class DecodeCall:
    """A drafter asks to append `tokens` to what `model` (a backend Model, or a Slot: one
    sequence of the draft model) has cached, and to be sent the logits of the last n_rows
    (float32[n_rows, V]). Those rows are a view valid until the model's next decode: a
    drafter uses them before it yields again."""

    model: object
    tokens: np.ndarray  # int32[n]
    n_rows: int


# a proposal in steps: yields DecodeCalls, is sent their rows, returns the Draft
DraftSteps = Generator[DecodeCall, np.ndarray, Draft]


def run_steps(steps: Generator[DecodeCall, np.ndarray, object]):
    """Drive a generator of DecodeCalls alone (each decoded at once); its return value."""
    try:
        call = next(steps)
        while True:
            try:
                rows = call.model.decode(call.tokens, call.model.n_cached, call.n_rows)
            except Exception as exc:  # noqa: BLE001 - raised through the plan, as if its own:
                call = steps.throw(exc)  # its finally and with clauses run now
                continue
            call = steps.send(rows)
    except StopIteration as done:
        return done.value


class Drafter(ABC):
    """Proposes up to k tokens that follow the committed ones. Per request the generation
    calls `begin` once, then each round the loop calls `propose` and, after verification,
    `accept`, and `end` when the request ends; `reset` when the conversation starts over.
    Only `propose` is required."""

    name = "drafter"
    # tokens others put in the same decode (side by side, other requests' blocks:
    # sidebyside.py sets it before each round; a grammar's forced tokens: Forced); what the
    # other requests are expected to commit, weighed against this request's (batch_yield);
    # and of those tokens, the ones whose cost is not the block's (batch_free: a forced head,
    # verified whatever is drafted). A drafter that prices its block (auto) maximises the
    # decode's weighed tokens per second: a long block that slows the others' step costs
    # what they would have committed in that time.
    batch_tokens = 0
    batch_yield = 0.0
    batch_free = 0

    def begin(self, family: str | None = None,  # noqa: B027 - a no-op by default
              n_prompt: int | None = None) -> None:
        """A request starts: drop what belonged to the previous one (not what was learned).
        family: a name for the kind of request (drafters.auto.learned.request_family) for
        drafters that learn per kind; None when unnamed. n_prompt: the prompt's tokens (the
        answer starts after them; None: not known)."""

    @abstractmethod
    def propose(self, history: np.ndarray, k: int, sampler: SamplerSettings | None = None,
                rng: np.random.Generator | None = None, grammar=None) -> Draft:
        """Up to k tokens after `history` (int32[n], every committed token). `grammar` (the
        state after `history`, or None): a drafter may use it to propose only allowed tokens;
        the loop cuts any draft at its first forbidden token anyway."""

    def propose_steps(self, history: np.ndarray, k: int, sampler: SamplerSettings | None = None,
                      rng: np.random.Generator | None = None, grammar=None) -> DraftSteps:
        """`propose` in steps (see the module docstring). A drafter that decodes nothing, or
        decodes otherwise (another vocabulary's draft model), proposes in one go: this. The
        round calls this, not `propose`: a drafter that proposes in steps (model, auto,
        forced) is changed by overriding propose_steps."""
        draft = self.propose(history, k, sampler, rng, grammar)
        yield from ()
        return draft

    def accept(self, n_drafted: int, n_accept: int,  # noqa: B027 - no-op unless it learns
               verify_seconds: float, grew_logits: bool = False) -> None:
        """What verification made of the last proposal: n_accept of n_drafted kept, the
        target pass took verify_seconds (the cost-aware drafter learns from it) to score
        them, its pending token and batch_tokens others; grew_logits: the pass scored more
        rows at once than any before it on this target, so its time includes llama.cpp
        growing its logits buffer (backend.Model.most_logit_rows). n_drafted 0: it was not
        asked, or its tokens were never judged (a grammar's token before them was wrong)."""

    def end(self, history: np.ndarray,  # noqa: B027 - a no-op unless it learns
            n_prompt: int | None = None) -> None:
        """The request ended (finished, closed or failed); `history` (int32[n]) holds the
        prompt (its first n_prompt tokens; None: not known) and every token committed."""

    def use_suffix_index(self, index) -> None:  # noqa: B027 - only lookup searches one
        """Search this suffix index (drafters/suffixstore.SuffixIndex, or None) besides the
        context from now on, and feed it each finished request."""

    def reset(self) -> None:  # noqa: B027 - a no-op for stateless drafters
        """Forget what was built from earlier text (a draft model's cache), not what was
        learned about costs and acceptance."""


def through_stop(tokens: np.ndarray, is_stop) -> int:
    """How many of `tokens` (int32[m]) are worth drafting: up to and including the first that
    ends the generation (is_stop: token id -> bool). The loop ends a generation at such a
    token under every rule (loop._commit), so a token drafted after it is scored in vain: a
    copy of a prompt's code block otherwise runs on past the answer's end into the chat
    template's markup."""
    for i, token in enumerate(tokens.tolist()):
        if is_stop(token):
            return i + 1
    return len(tokens)
