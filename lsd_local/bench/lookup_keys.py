"""What per-key memories of n-gram drafting could know on recorded answers (issue 36, item 2).

llama.cpp's `ngram-map-k` remembers per key n-gram how many tokens were accepted the last
time it drafted from it and drafts at most that many next time; `ngram-map-k4v` also counts
up to four continuations per key and drafts only when the most frequent is at least twice
as frequent as the others together. Both draft what followed the occurrence they found (the
latest in the prompt, else the latest: common/ngram-map.cpp). lsd's lookup instead proposes
the continuation whose copy has run longest (drafters/lookup.py) and prices it by that run
(drafters/auto/lookup_acceptance.py); the issue asked for the dominant continuation. These
counts, over a replay recording's answers, tell whether either memory has anything to act
on: how often an answer proposes again from a key it proposed from before, and, where a
key's earlier occurrences continue differently, which choice names the token that came.
They compare first tokens after keys of lsd's shortest n-gram, where llama.cpp compares
48-token continuations after 12-token keys. `bench/replay_auto.py keys RECORDING` prints
them per prompt set (docs/auto.md).
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


def occurrences(sequence: np.ndarray, p: int, key_len: int) -> np.ndarray:
    """int64[m]: where each earlier occurrence of sequence[p - key_len:p] starts in
    sequence[:p], with the token after it also in sequence[:p], oldest first.
    sequence: int32[n]."""
    if p <= key_len:
        return np.zeros(0, np.int64)
    key = sequence[p - key_len:p]
    windows = sliding_window_view(sequence[:p - 1], key_len)  # starts 0..p-1-key_len
    return np.flatnonzero((windows == key).all(axis=1))


def continuations(sequence: np.ndarray, p: int, key_len: int) -> list[int]:
    """The tokens that followed each earlier occurrence of sequence[p - key_len:p] in
    sequence[:p], oldest first. sequence: int32[n]."""
    return sequence[occurrences(sequence, p, key_len) + key_len].tolist()


def continuation_choices(sequence: np.ndarray, n_prompt: int, proposed: dict[int, int],
                         key_len: int = MIN_NGRAM) -> Counter:
    """Where lookup proposes and the key_len tokens before have earlier occurrences that
    continue differently ("ambiguous"), how often each choice names the token that came:
    lookup's ("lookup"), the most frequent continuation ("frequent"), the latest
    ("latest"); and k4v's, which drafts only where the most frequent is at least twice as
    frequent as the others together ("k4v drafts") what followed the latest occurrence in
    the prompt (sequence[:n_prompt]), else the latest ("k4v right"). sequence: int32[n]."""
    counts: Counter = Counter()
    for p, first in proposed.items():
        starts = occurrences(sequence, p, key_len)
        nexts = sequence[starts + key_len].tolist()
        if len(set(nexts)) < 2:
            continue
        truth = int(sequence[p])
        (top, n_top), = Counter(nexts).most_common(1)  # (ties: the oldest, as llama.cpp's)
        counts["ambiguous"] += 1
        counts["lookup"] += first == truth
        counts["frequent"] += top == truth
        counts["latest"] += nexts[-1] == truth
        if n_top >= 2 * (len(nexts) - n_top):
            in_prompt = starts[starts + key_len < n_prompt]
            found = in_prompt[-1] if len(in_prompt) else starts[-1]
            counts["k4v drafts"] += 1
            counts["k4v right"] += int(sequence[found + key_len]) == truth
    return counts
