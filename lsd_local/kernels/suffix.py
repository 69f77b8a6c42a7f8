"""A suffix index over what this process (and, persisted, earlier ones) has seen: the answers
of past requests with the end of their prompts. Prompt lookup searches the current context
only; agents, editors and chat repeat themselves across requests (the same tool-call shapes,
boilerplate, an answer asked for again), which SuffixDecoding (arXiv 2411.04975) drafts from
a suffix tree over previous outputs.

Here the index is a ring buffer of tokens with a hash chain over every HASH_N-gram (as a
compressor's match finder): memory is fixed by the capacity (SUFFIX_TOKENS by default:
docs/drafting.md), the oldest text goes first. A query hashes the context's last HASH_N
tokens, walks the chain over the most recent MAX_CANDIDATES occurrences, measures how far
back each matches the context (its run), and proposes what followed the longest-running one;
among equally long ones, the continuation most occurrences agree on (seen most often), then
the most recent. Documents are separated by SEP, which no context token equals, so a match
or a continuation never crosses from one request into another.

`index_find` / `index_add` are numba kernels; `find_reference` is the slow, independent
statement of the same answer (a scan of every stored position), which the tests hold the
kernels to.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..config import RUN_CAP

SEP = -1  # between documents
HASH_N = 4  # tokens hashed per n-gram: the shortest match the index can find
MAX_CANDIDATES = 32  # occurrences examined per query, the most recent first
# n-grams hash as h = (h * HASH_MUL + token + 1) mod HASH_MOD: no overflow in int64, so the
# kernels run unchanged as Python (their .py_func) until numba has loaded them (jit.py)
HASH_MUL = 1000003
HASH_MOD = 2147483647


@njit(cache=True, nogil=True)
def index_add(ring, chain, table, total, doc, hash_n):
    """Append SEP and doc (int32[m]) at absolute position `total`; ring int32[cap], chain
    int64[cap] (the previous position of the same hash), table int64[2^b] (the latest
    position per hash; -1: none). Returns the new total."""
    cap = ring.shape[0]
    mask = table.shape[0] - 1
    ring[total % cap] = SEP
    chain[total % cap] = -1
    total += 1
    for i in range(doc.shape[0]):
        slot = total % cap
        ring[slot] = doc[i]
        chain[slot] = -1
        if i >= hash_n - 1:
            h = 0
            for j in range(i - hash_n + 1, i + 1):
                h = (h * HASH_MUL + np.int64(doc[j]) + 1) % HASH_MOD
            h &= mask
            chain[slot] = table[h]
            table[h] = total
        total += 1
    return total


@njit(cache=True, nogil=True)
def index_find(ring, chain, table, total, context, hash_n, min_n, k, run_cap,
               max_candidates, out):
    """context: int32[n]; out: int32[>= k] -> (tokens set in out, the run of the match
    they follow; 0 when there is none of at least min_n tokens)."""
    n = context.shape[0]
    cap = ring.shape[0]
    if n < hash_n or total == 0:
        return 0, 0
    oldest = max(total - cap, 0)
    ends = np.empty(max_candidates, np.int64)
    runs = np.empty(max_candidates, np.int64)
    nexts = np.empty(max_candidates, np.int64)
    found = 0
    walked = 0
    h = 0
    for j in range(n - hash_n, n):
        h = (h * HASH_MUL + np.int64(context[j]) + 1) % HASH_MOD
    p = table[h & (table.shape[0] - 1)]
    while p >= oldest and walked < max_candidates:
        walked += 1
        run = 0
        while run < run_cap and run < n and p - run >= oldest and \
                ring[(p - run) % cap] == context[n - 1 - run]:
            run += 1
        if run >= min_n and p + 1 < total and ring[(p + 1) % cap] != SEP:
            ends[found] = p
            runs[found] = run
            nexts[found] = ring[(p + 1) % cap]
            found += 1
        p = chain[p % cap]
    best = -1
    best_votes = 0
    for i in range(found):
        votes = 0
        for j in range(found):
            if nexts[j] == nexts[i]:
                votes += 1
        if best < 0 or runs[i] > runs[best] or (runs[i] == runs[best] and votes > best_votes):
            best = i
            best_votes = votes
    if best < 0:
        return 0, 0
    m = 0
    q = ends[best] + 1
    while m < k and q < total and ring[q % cap] != SEP:
        out[m] = ring[q % cap]
        m += 1
        q += 1
    return m, runs[best]


def find_reference(added: np.ndarray, capacity: int, context: np.ndarray, table_size: int,
                   k: int, min_n: int, hash_n: int = HASH_N, run_cap: int = RUN_CAP,
                   max_candidates: int = MAX_CANDIDATES) -> tuple[np.ndarray, int]:
    """The answer index_find gives, by scanning: `added` int32[t] is everything ever added
    in order (SEP before each document), of which the last `capacity` tokens are kept;
    context int32[n]. Candidates are the kept positions whose n-gram lies in one document
    and hashes (masked) like the context's last one, the most recent max_candidates of them;
    a run is measured within the kept text. -> (int32[<= k], run)."""
    added = np.asarray(added, np.int64)
    context = np.asarray(context, np.int32)
    n, total = len(context), len(added)
    if n < hash_n or not total:
        return np.zeros(0, np.int32), 0
    oldest = max(total - capacity, 0)
    mask = table_size - 1
    ends = np.arange(max(oldest, hash_n - 1), total)  # the kept n-grams' last positions
    windows = np.stack([added[ends - hash_n + 1 + i] for i in range(hash_n)], axis=1)
    hashes = masked_hashes(windows, mask)
    want = masked_hashes(context[None, n - hash_n:].astype(np.int64), mask)[0]
    whole = (windows != SEP).all(axis=1)  # the n-gram lies in one document
    candidates = ends[whole & (hashes == want)][::-1][:max_candidates].tolist()
    scored = []
    for p in candidates:
        span = min(run_cap, n, p - oldest + 1)
        before = added[p - span + 1:p + 1][::-1] != context[n - span:][::-1]
        run = int(np.argmax(before)) if before.any() else span
        if run >= min_n and p + 1 < total and added[p + 1] != SEP:
            scored.append((p, run, int(added[p + 1])))
    if not scored:
        return np.zeros(0, np.int32), 0
    votes = {nxt: sum(1 for s in scored if s[2] == nxt) for _, _, nxt in scored}
    best = max(scored, key=lambda s: (s[1], votes[s[2]]))  # (max keeps the first: recent)
    after = added[best[0] + 1:]
    stop = np.flatnonzero(after == SEP)
    after = after[:stop[0]] if len(stop) else after
    return after[:k].astype(np.int32), best[1]


def masked_hashes(windows: np.ndarray, mask: int) -> np.ndarray:
    """int64[m]: the kernels' hash of each row of windows int64[m, hash_n], masked."""
    h = np.zeros(len(windows), np.int64)
    for column in windows.T:
        h = (h * HASH_MUL + column + 1) % HASH_MOD
    return h & mask
