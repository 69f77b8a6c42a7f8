"""The KV state of a few recent conversations, kept in RAM so that alternating clients do not
re-evaluate each other's history.

One llama.cpp context holds one conversation's cache at a time. A multi-turn client resends
its whole conversation each turn, and the engine's prefill already reuses the longest cached
prefix (backend.Model.reuse_prefix). When another conversation is served in between, that
prefix is gone. This cache saves the live cache of both models (llama.cpp's sequence state)
just before a request with another history overwrites it, and restores the saved state whose
tokens share the longest prefix with a new prompt, when that beats what the live cache holds.
Saving happens only on a switch, so one client talking alone never pays for a copy.

Side by side (several sequences in one KV buffer), a sequence no request holds is parked here
when another request starts (`park`): llama.cpp's attention runs over every cell in use up
to the highest one, masked or not, so idle conversations left in the buffer made every
step of the others dearer (measured: t(1) +16 %, a block of 64 +8 % with three idle
900-token conversations beside a 900-token one: docs/server.md, docs/benchmarks.md).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from .config import STATE_CACHE_MAX_BYTES, STATE_CACHE_MIN_TOKENS
from .errors import check


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of two int32 token arrays."""
    m = min(len(a), len(b))
    differ = np.flatnonzero(a[:m] != b[:m])
    return int(differ[0]) if len(differ) else m


@dataclass(frozen=True)
class Snapshot:
    """Both models' caches at one moment (the draft's may be None: no draft model)."""

    target: object  # backend.SeqState of the target
    draft: object | None  # backend.SeqState of the draft model, if the engine has one

    @property
    def tokens(self) -> np.ndarray:
        """int32[n]: the tokens the target's cache held."""
        return self.target.tokens

    @property
    def nbytes(self) -> int:
        return self.target.nbytes + (self.draft.nbytes if self.draft is not None else 0)


class StateCache:
    """Up to `capacity` saved conversations (least recently used goes first), at most
    `max_bytes` in all. Used by Engine's prefill: `switch_to(target, draft, prompt)`."""

    def __init__(self, capacity: int, max_bytes: int = STATE_CACHE_MAX_BYTES,
                 min_tokens: int = STATE_CACHE_MIN_TOKENS) -> None:
        check(capacity >= 0, "state_cache", f"{capacity} (must be >= 0)")
        check(max_bytes >= 0, "state_cache_bytes", f"{max_bytes} (must be >= 0)")
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.min_tokens = min_tokens  # fewer tokens than this are cheaper to evaluate again
        self._saved: OrderedDict[int, Snapshot] = OrderedDict()
        self._next_key = 0
        self.restored = 0  # states brought back so far

    def __len__(self) -> int:
        return len(self._saved)

    @property
    def nbytes(self) -> int:
        return sum(snap.nbytes for snap in self._saved.values())

    def switch_to(self, target, draft, prompt: np.ndarray) -> int:
        """Before a prompt (int32[n]) is prefilled: set the live cache aside when the prompt
        would throw most of it away, and bring back the saved one that shares the longest
        prefix with the prompt when it beats the live one. Returns the prompt tokens the
        restore saved (0 when nothing was restored). `target`/`draft`: backend Slots."""
        live = common_prefix(target.cached_tokens, prompt[:len(prompt) - 1])
        best_key, best = self._best(prompt, live)
        restore = best_key is not None and best - live >= self.min_tokens
        snap = self._saved[best_key] if restore else None
        whole = restore and best == len(snap.tokens)
        if whole:
            # the prompt continues it whole: it becomes the live cache, saved again on the
            # next switch (taken out first: saving the live one may need its room)
            del self._saved[best_key]
        elif restore:  # only a shared head (a system prompt) is used: the rest stays saved
            self._saved.move_to_end(best_key)
        if target.n_cached - live >= self.min_tokens:
            self._save(target, draft, best_key)  # another conversation's history: keep it
        if snap is None:
            return 0
        try:
            target.restore_state(snap.target)
            if draft is not None and snap.draft is not None:
                draft.restore_state(snap.draft)
            elif draft is not None:
                draft.truncate(0)
        except RuntimeError:  # llama.cpp refused (no room for its cells): evaluate instead
            target.truncate(0)
            if draft is not None:
                draft.truncate(0)
            if whole:  # (kept for a later request)
                self._saved[best_key] = snap
                self._evict(best_key)
            return 0
        self.restored += 1
        return best - live

    def best_key(self, prompt: np.ndarray) -> int | None:
        """The saved conversation `switch_to` would restore for this prompt (int32[n]) into
        an empty sequence (None: none shares a token with it)."""
        return self._best(prompt, 0)[0]

    def _best(self, prompt: np.ndarray, live: int) -> tuple[int | None, int]:
        """(key, shared prefix) of the saved state sharing the longest prefix with the
        prompt, longer than `live`; of equals, the smallest (less to copy back)."""
        head = prompt[:len(prompt) - 1]  # (the last prompt token is always evaluated)
        best_key, best, size = None, live, 0
        for key, snap in self._saved.items():
            shared = common_prefix(snap.tokens, head)
            if shared > best or (shared == best and best_key is not None
                                 and len(snap.tokens) < size):
                best_key, best, size = key, shared, len(snap.tokens)
        return best_key, best

    def keeps(self, target, draft) -> bool:
        """Whether a sequence's cache (target/draft: its backend slots; draft may be None)
        would be kept here if it were set aside now, rather than thrown away: room for it."""
        if target.n_cached < self.min_tokens:
            return True  # (too short to keep: cheaper to evaluate again, nothing lost)
        size = target.state_nbytes() + (draft.state_nbytes() if draft is not None else 0)
        return self.capacity > 0 and size <= self.max_bytes

    def park(self, target, draft, pinned: int | None = None) -> bool:
        """Set an idle sequence's cache aside (target/draft: its backend slots; draft may be
        None) and empty it; a history shorter than min_tokens is dropped, cheaper to
        evaluate again. Returns False, leaving the cache in place, when it cannot be kept
        (no room: capacity 0, or larger than the whole budget). The saved state `pinned`
        (best_key: the one a starting request is about to restore) is not evicted for it."""
        if target.n_cached >= self.min_tokens and not self._save(target, draft, pinned):
            return False
        target.truncate(0)
        if draft is not None:
            draft.truncate(0)
        return True

    def _save(self, target, draft, pinned: int | None = None) -> bool:
        """Save a sequence's cache; whether it is kept (not evicted at once for room)."""
        size = target.state_nbytes() + (draft.state_nbytes() if draft is not None else 0)
        if self.capacity == 0 or size > self.max_bytes:
            return False  # (one state larger than the whole budget would only evict the others)
        snap = Snapshot(target.save_state(), draft.save_state() if draft is not None else None)
        tokens = snap.tokens
        for key in [key for key, old in self._saved.items()  # older states of the same
                    if common_prefix(old.tokens, tokens) == len(old.tokens)]:  # conversation
            del self._saved[key]
        key = self._next_key
        self._saved[key] = snap
        self._next_key += 1
        self._evict(pinned)
        return key in self._saved

    def _evict(self, pinned: int | None) -> None:
        """Drop the least recently used states, never `pinned` while another is left, until
        the count and the bytes fit."""
        while self._saved and (len(self._saved) > self.capacity
                               or self.nbytes > self.max_bytes):
            oldest = next((key for key in self._saved if key != pinned), pinned)
            del self._saved[oldest]


def park_others(cache: StateCache, idle: list[int], keep: int, prompt: np.ndarray, target,
                draft) -> None:
    """Park (StateCache.park) the caches of the sequences `idle` (no request holds them)
    other than `keep`, of the backend Models target and draft (None: no draft model): one
    KV buffer serves every sequence, and llama.cpp scores each decode against all of its
    cells in use, so an idle conversation left there slows every other request. The saved
    state that sequence `keep`'s prompt (int32[n]) is about to restore is not evicted for
    them; one that cannot be kept, or whose copy fails, stays."""
    pinned = cache.best_key(prompt)
    for seq in idle:
        target_slot = target.slots[seq]
        draft_slot = draft.slots[seq] if draft is not None else None
        if seq != keep and (target_slot.n_cached or (
                draft_slot is not None and draft_slot.n_cached)):
            try:
                cache.park(target_slot, draft_slot, pinned)
            except (RuntimeError, MemoryError):  # (a failed copy: the cache stays in place)
                continue
