"""Grammar constraints on a verified block, applied in the round loop before the verifier.

Row j of a block predicts the token after the committed text plus draft[:j]; the grammar state
for it is the committed state advanced by draft[:j]. Preparing a block:

- makes each row's argmax the best token the grammar allows there (forbidden tokens ranked
  above it get -inf), so every rule's "target token" y* is the constrained argmax;
- cuts the draft before its first token the grammar forbids: a forbidden token is a mismatch
  no loose rule may accept (no later row can be used, as there is no grammar state after it).

A full mask asks the grammar about every token of the vocabulary (on Qwen's 151,936 tokens
about as much as a target step: docs/structured-output.md), so rows are checked best-first:
usually the argmax is allowed and one check settles the row. `n_top` asks for the best n_top
allowed tokens to be exact at the top of the row (FLy's top-k entropy, the sampler's top-k); 0
asks for a full mask. The grammar object is duck-typed: allows(token), accept(token, checked),
mask(row), clone(), close().
"""

from __future__ import annotations

import numpy as np

from ..config import RuleConfig, SamplerSettings
from ..errors import GrammarError
from ..kernels.rows import top_entries

FIRST_CANDIDATES = 16  # one pass over the row finds these (cheaper than an argpartition)
CANDIDATES = 256  # best-first checks before falling back to a full mask


def constrain_row(state, row: np.ndarray, n_top: int) -> int:
    """Mask forbidden tokens at the top of `row` (float32[V], in place) until its `n_top` best
    are allowed (n_top 0: all of it); return the constrained argmax."""
    if n_top == 1:
        best = int(np.argmax(row))
        if row[best] != -np.inf and state.allows(best):
            return int(best)
    if n_top > 0:
        best = _best_first(state, row, n_top)
        if best >= 0:
            return best
    state.mask(row)
    best = int(np.argmax(row))
    if row[best] == -np.inf:
        raise GrammarError("the grammar allows no token of this vocabulary here (is a character "
                           "it requires missing from the model's tokens?)")
    return int(best)


def _best_first(state, row: np.ndarray, n_top: int) -> int:
    """Check tokens in descending logit order; -1 when a full mask is needed."""
    first, found = -1, 0
    for n in (FIRST_CANDIDATES, CANDIDATES):  # forbidden ones checked are -inf by the 2nd pass
        for token in top_entries(row, min(max(n, n_top), len(row))):
            token = int(token)
            if row[token] == -np.inf:
                return first  # nothing finite is left: the allowed ones found are all there is
            if state.allows(token):
                found += 1
                first = token if first < 0 else first
                if found == n_top:
                    return first
            else:
                row[token] = -np.inf
        first, found = -1, 0  # the second pass sees the allowed ones again
    return -1


def allowed_prefix(grammar, tokens: np.ndarray) -> int:
    """How many of `tokens` (int32[n]) the grammar allows in a row from its current state."""
    state = grammar.clone()
    try:
        for i, token in enumerate(tokens):
            if not state.allows(int(token)):
                return i
            state.accept(int(token), checked=True)
        return len(tokens)
    finally:
        state.close()


def prepare_block(grammar, logits: np.ndarray, draft: np.ndarray, n_top: int,
                  stop_at_mismatch: bool) -> int:
    """Constrain rows of `logits` (float32[K+1, V], in place) along `draft` (int32[K]) and return
    how many draft tokens the verifier may see (rows 0..that number are ready). With
    `stop_at_mismatch` (strict greedy), stop at the first row whose constrained argmax differs
    from the draft: the verifier reads nothing after it."""
    state = grammar.clone()
    try:
        for j in range(len(draft) + 1):
            best = constrain_row(state, logits[j], n_top)
            if j == len(draft):
                return j
            token = int(draft[j])
            if (stop_at_mismatch and token != best) or (token != best
                                                      and not state.allows(token)):
                return j
            state.accept(token, checked=True)  # best, or just asked
        return len(draft)
    finally:
        state.close()


def grammar_top(rule: RuleConfig, sampler: SamplerSettings | None, n_vocab: int) -> int:
    """How many allowed tokens must be exact at the top of each row: the sampler's top-k
    (0 = the whole row), FLy's top-k entropy, else just the argmax. FLy's "normalized"
    entropy keeps 1: its gate then reads forbidden tokens under the argmax too."""
    if sampler is not None:
        return sampler.top_k if sampler.top_k < n_vocab else 0
    if rule.rule == "fly" and rule.entropy == "topk":
        return rule.entropy_top_k
    return 1
