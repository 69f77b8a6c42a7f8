"""What per-key memories of n-gram drafting could know on recorded answers (issue 36, item 2).

llama.cpp's `ngram-map-k` remembers per key n-gram how many tokens were accepted the last
time it drafted from it and drafts at most that many next time; `ngram-map-k4v` also keeps
up to four continuations per key and drafts the most frequent one when it is at least twice
as frequent as the others. lsd's lookup instead proposes the continuation whose copy has run
longest (drafters/lookup.py) and prices it by that run (drafters/auto/lookup_acceptance.py).
These counts, over a replay recording's answers, tell whether either memory has anything to
act on: how often an answer proposes again from a key it proposed from before, and, where a
key's earlier occurrences continue differently, which choice names the token that came.
`bench/replay_auto.py keys RECORDING` prints them per prompt set (docs/auto.md).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..config import MIN_NGRAM
from ..drafters.lookup import LookupDrafter


def proposal_positions(sequence: np.ndarray, n_prompt: int,
                       lookup: LookupDrafter | None = None) -> dict[int, int]:
    """sequence: int32[n] prompt + answer. Answer position p (an index into sequence) ->
    the first token lookup proposes after sequence[:p], for every p where it proposes."""
    lookup = lookup or LookupDrafter()
    out = {}
    for p in range(n_prompt, len(sequence)):
        proposal = lookup.propose(sequence[:p], 1)
        if len(proposal):
            out[p] = int(proposal.tokens[0])
    return out


def key_recurrence(sequence: np.ndarray, proposed: dict[int, int],
                   key_len: int) -> tuple[int, int]:
    """(positions where lookup proposes, those whose key, the key_len tokens before, lookup
    also proposed after at an earlier answer position): the most a per-key memory within
    one answer could act on. sequence: int32[n]; proposed: proposal_positions'."""
    seen: set[tuple[int, ...]] = set()
    recurring = 0
    for p in sorted(proposed):
        key = tuple(sequence[max(0, p - key_len):p].tolist())
        recurring += key in seen
        seen.add(key)
    return len(proposed), recurring


def continuations(sequence: np.ndarray, p: int, key_len: int) -> list[int]:
    """The tokens that followed each earlier occurrence of sequence[p - key_len:p] in
    sequence[:p], oldest first. sequence: int32[n]."""
    if p <= key_len:
        return []
    key = sequence[p - key_len:p]
    windows = sliding_window_view(sequence[:p - 1], key_len)  # starts 0..p-1-key_len
    starts = np.flatnonzero((windows == key).all(axis=1))
    return sequence[starts + key_len].tolist()


def continuation_choices(sequence: np.ndarray, proposed: dict[int, int],
                         key_len: int = MIN_NGRAM) -> Counter:
    """Where lookup proposes and the key_len tokens before have earlier occurrences that
    continue differently ("ambiguous"), how often each choice names the token that came:
    lookup's ("lookup"), the most frequent continuation ("frequent"), the latest
    ("latest"); and k4v's rule, which drafts the most frequent only when it is at least
    twice as frequent as the others together ("k4v drafts", "k4v right")."""
    counts: Counter = Counter()
    for p, first in proposed.items():
        nexts = continuations(sequence, p, key_len)
        if len(set(nexts)) < 2:
            continue
        truth = int(sequence[p])
        (top, n_top), = Counter(nexts).most_common(1)
        counts["ambiguous"] += 1
        counts["lookup"] += first == truth
        counts["frequent"] += top == truth
        counts["latest"] += nexts[-1] == truth
        if n_top >= 2 * (len(nexts) - n_top):
            counts["k4v drafts"] += 1
            counts["k4v right"] += top == truth
    return counts
