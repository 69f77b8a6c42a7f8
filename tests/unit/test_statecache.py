"""StateCache's choices (what to set aside, what to bring back, what to forget) against fake
models that record their cache as a token list."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lsd_local.statecache import StateCache, common_prefix, park_others


@dataclass(frozen=True)
class FakeState:
    tokens: np.ndarray
    nbytes: int


class FakeModel:
    """What StateCache uses of a backend Model: cached tokens, save/restore, truncate."""

    def __init__(self, bytes_per_token: int = 100) -> None:
        self.cached_tokens = np.zeros(0, np.int32)
        self.bytes_per_token = bytes_per_token
        self.restores = 0
        self.refuse = False  # restore_state fails as llama.cpp's would

    @property
    def n_cached(self) -> int:
        return len(self.cached_tokens)

    def hold(self, tokens) -> None:  # what a prefill and a generation leave in the cache
        self.cached_tokens = np.asarray(tokens, np.int32)

    def state_nbytes(self) -> int:
        return self.bytes_per_token * self.n_cached

    def save_state(self) -> FakeState:
        return FakeState(self.cached_tokens.copy(), self.bytes_per_token * self.n_cached)

    def restore_state(self, state: FakeState) -> None:
        if self.refuse:
            raise RuntimeError("llama.cpp restored 0 of 5000 bytes of a saved state")
        self.cached_tokens = state.tokens.copy()
        self.restores += 1

    def truncate(self, n: int) -> None:
        self.cached_tokens = self.cached_tokens[:n]


def conversation(seed: int, n: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(1000, 2000, n)]


def test_common_prefix():
    a = np.array([1, 2, 3, 4], np.int32)
    assert common_prefix(a, np.array([1, 2, 9], np.int32)) == 2
    assert common_prefix(a, a[:2]) == 2 and common_prefix(a, np.zeros(0, np.int32)) == 0


def test_alternating_conversations_come_back():
    target, draft, cache = FakeModel(), FakeModel(), StateCache(4, min_tokens=16)
    ann, bob = conversation(1, 100), conversation(2, 120)
    target.hold(ann)
    draft.hold(ann[:90])
    assert cache.switch_to(target, draft, np.array(bob + [5], np.int32)) == 0  # nothing saved
    assert len(cache) == 1  # ann's cache was set aside
    target.hold(bob)
    draft.truncate(0)
    gained = cache.switch_to(target, draft, np.array(ann + [7, 8], np.int32))
    assert gained == 100 and list(target.cached_tokens) == ann
    assert list(draft.cached_tokens) == ann[:90]  # the draft's own cache came back with it
    assert len(cache) == 1 and list(cache._saved.values())[0].tokens.tolist() == bob


def test_one_client_alone_never_copies():
    target, cache = FakeModel(), StateCache(4, min_tokens=16)
    talk = conversation(3, 50)
    for turn in range(5):
        target.hold(talk)
        talk = talk + conversation(10 + turn, 30)
        assert cache.switch_to(target, None, np.array(talk, np.int32)) == 0
    assert len(cache) == 0 and target.restores == 0


def test_short_histories_are_not_worth_a_copy():
    target, cache = FakeModel(), StateCache(4, min_tokens=16)
    target.hold(conversation(4, 10))
    cache.switch_to(target, None, np.array(conversation(5, 30), np.int32))
    assert len(cache) == 0


def test_an_extended_conversation_replaces_its_older_state():
    target, cache = FakeModel(), StateCache(4, min_tokens=16)
    ann = conversation(6, 60)
    other = np.array(conversation(7, 40), np.int32)
    target.hold(ann)
    cache.switch_to(target, None, other)
    target.hold(ann + conversation(8, 20))  # ann's next turn ran from the live cache
    cache.switch_to(target, None, other)
    assert len(cache) == 1 and len(list(cache._saved.values())[0].tokens) == 80


def test_capacity_and_bytes_evict_the_least_recently_saved():
    target, cache = FakeModel(bytes_per_token=10), StateCache(2, max_bytes=10**6, min_tokens=1)
    talks = [conversation(20 + i, 50) for i in range(4)]
    for talk, following in zip(talks, talks[1:], strict=False):
        target.hold(talk)
        cache.switch_to(target, None, np.array(following, np.int32))
    assert [s.tokens.tolist() for s in cache._saved.values()] == talks[1:3]
    small = StateCache(10, max_bytes=1200, min_tokens=1)  # room for two 50-token states
    for talk, following in zip(talks, talks[1:], strict=False):
        target.hold(talk)
        small.switch_to(target, None, np.array(following, np.int32))
    assert len(small) == 2 and small.nbytes <= 1200


def test_capacity_zero_keeps_nothing():
    target, cache = FakeModel(), StateCache(0)
    target.hold(conversation(30, 100))
    cache.switch_to(target, None, np.array(conversation(31, 100), np.int32))
    assert len(cache) == 0


def test_the_oldest_saved_state_comes_back_when_the_cache_is_full():
    """Saving the live cache evicts the least recently saved state: when that one is the
    state the prompt needs, it comes back all the same."""
    target, cache = FakeModel(), StateCache(2, min_tokens=1)
    talks = [conversation(40 + i, 50) for i in range(3)]
    for talk, following in zip(talks, talks[1:], strict=False):
        target.hold(talk)
        cache.switch_to(target, None, np.array(following, np.int32))
    target.hold(talks[2])
    assert cache.switch_to(target, None, np.array(talks[0] + [1, 2], np.int32)) == 50
    assert list(target.cached_tokens) == talks[0]
    assert sorted(len(s.tokens) for s in cache._saved.values()) == [50, 50]


def test_a_state_larger_than_the_budget_evicts_nothing():
    target, cache = FakeModel(bytes_per_token=10), StateCache(4, max_bytes=1000, min_tokens=1)
    small, big = conversation(50, 50), conversation(51, 200)
    target.hold(small)
    cache.switch_to(target, None, np.array(big, np.int32))
    target.hold(big)  # 2000 bytes: more than the whole budget
    cache.switch_to(target, None, np.array(conversation(52, 30), np.int32))
    assert [len(s.tokens) for s in cache._saved.values()] == [50]


def test_a_refused_restore_falls_back_to_a_full_prefill():
    target, draft, cache = FakeModel(), FakeModel(), StateCache(4, min_tokens=1)
    ann, bob = conversation(60, 80), conversation(61, 80)
    target.hold(ann)
    cache.switch_to(target, draft, np.array(bob, np.int32))
    target.hold(bob)
    draft.hold(bob[:40])
    target.refuse = True
    assert cache.switch_to(target, draft, np.array(ann + [3], np.int32)) == 0
    assert target.n_cached == 0 and draft.n_cached == 0 and cache.restored == 0


def test_a_shared_head_brings_a_state_back_and_keeps_it_saved():
    """A new conversation that shares only a system prompt with a saved one restores it for
    that head, and the saved conversation stays: its client comes back to all of it."""
    system = conversation(70, 24)
    ann, bob = system + conversation(71, 300), system + [t + 5000 for t in conversation(72, 40)]
    target, cache = FakeModel(), StateCache(4, min_tokens=16)
    target.hold(ann)
    cache.switch_to(target, None, np.array(conversation(73, 30), np.int32))  # ann set aside
    target.hold(conversation(73, 30))
    assert cache.switch_to(target, None, np.array(bob, np.int32)) == 24
    assert [len(s.tokens) for s in cache._saved.values()] == [324, 30]
    target.hold(bob)  # bob's prefill kept the head and went on
    assert cache.switch_to(target, None, np.array(ann + [5], np.int32)) == 300
    assert list(target.cached_tokens) == ann


def test_park_sets_an_idle_sequence_aside_and_empties_it():
    target, draft, cache = FakeModel(), FakeModel(), StateCache(4, min_tokens=16)
    ann = conversation(80, 100)
    target.hold(ann)
    draft.hold(ann[:70])
    assert cache.park(target, draft)
    assert target.n_cached == 0 and draft.n_cached == 0 and len(cache) == 1
    gained = cache.switch_to(target, draft, np.array(ann + [1], np.int32))
    assert gained == 100 and list(draft.cached_tokens) == ann[:70]


def test_park_drops_a_short_history_and_keeps_what_it_cannot_save():
    target, cache = FakeModel(), StateCache(4, min_tokens=16)
    target.hold(conversation(81, 10))  # cheaper to evaluate again than to copy
    assert cache.park(target, None) and target.n_cached == 0 and len(cache) == 0
    for full in (StateCache(0), StateCache(4, max_bytes=1000, min_tokens=16)):
        target.hold(conversation(82, 100))  # no room: 10,000 bytes
        assert not full.park(target, None)
        assert target.n_cached == 100 and len(full) == 0


class FakeSlots:
    def __init__(self, n: int) -> None:
        self.slots = [FakeModel() for _ in range(n)]


def test_park_others_parks_every_idle_sequence_but_the_one_starting():
    target, draft, cache = FakeSlots(4), FakeSlots(4), StateCache(8, min_tokens=16)
    for seq in range(4):
        target.slots[seq].hold(conversation(90 + seq, 50))
        draft.slots[seq].hold(conversation(90 + seq, 20))
    prompt = np.array(conversation(99, 30), np.int32)
    park_others(cache, [0, 2, 3], 2, prompt, target, draft)  # 1 is held: a generation runs there
    assert [s.n_cached for s in target.slots] == [0, 50, 50, 0]
    assert [s.n_cached for s in draft.slots] == [0, 20, 20, 0]
    assert sorted(s.tokens[0] for s in cache._saved.values()) == sorted(
        [conversation(90, 1)[0], conversation(93, 1)[0]])
    empty = FakeSlots(4)
    park_others(cache, [0, 1, 3], 0, prompt, empty, None)  # no draft model, nothing cached
    assert len(cache) == 2 and all(s.restores == 0 for s in empty.slots)


def test_parking_never_evicts_the_state_the_starting_request_restores():
    """Idle sequences parked just before a request's prefill must not push out of a full
    cache the conversation that request is about to continue (review of 974b8c3)."""
    ann = conversation(100, 200)
    cache, target = StateCache(2, min_tokens=16), FakeSlots(3)
    target.slots[0].hold(ann)
    assert cache.park(target.slots[0], None)  # ann's client left; its state is the oldest
    for seq in (1, 2):
        target.slots[seq].hold(conversation(100 + seq, 50))
    prompt = np.array(ann + [5], np.int32)
    park_others(cache, [0, 1, 2], 0, prompt, target, None)
    assert [s.n_cached for s in target.slots] == [0, 0, 0] and len(cache) == 2
    assert cache.switch_to(target.slots[0], None, prompt) == 200


def test_a_failed_copy_leaves_that_cache_in_place_and_parks_the_others():
    class Failing(FakeModel):
        def save_state(self):
            raise MemoryError

    target, cache = FakeSlots(3), StateCache(4, min_tokens=16)
    target.slots[1] = Failing()
    for seq in range(3):
        target.slots[seq].hold(conversation(110 + seq, 40))
    park_others(cache, [1, 2], 0, np.array([1, 2], np.int32), target, None)
    assert [s.n_cached for s in target.slots] == [40, 40, 0] and len(cache) == 1


def test_a_state_evicted_by_its_own_save_is_not_parked():
    """A state that fits the byte budget alone but not with its tokens' bytes counted is
    evicted as it is saved: parking it would throw the conversation away."""
    target = FakeModel()
    target.hold(conversation(120, 100))
    cache = StateCache(4, max_bytes=100 * 100, min_tokens=16)  # exactly the KV bytes

    class Counted(StateCache):  # a snapshot also holds its tokens
        @property
        def nbytes(self) -> int:
            return sum(s.nbytes + 4 * len(s.tokens) for s in self._saved.values())

    counted = Counted(4, max_bytes=100 * 100, min_tokens=16)
    assert cache.park(target, None) and len(cache) == 1
    target.hold(conversation(120, 100))
    assert not counted.park(target, None) and target.n_cached == 100 and len(counted) == 0


def test_keeps_says_whether_a_cache_would_be_saved_or_lost():
    target, draft = FakeModel(), FakeModel()
    target.hold(conversation(130, 100))
    draft.hold(conversation(130, 100))
    assert StateCache(4, min_tokens=16).keeps(target, draft)
    assert not StateCache(0).keeps(target, draft)
    assert not StateCache(4, max_bytes=15_000, min_tokens=16).keeps(target, draft)  # 20,000
    assert StateCache(4, max_bytes=15_000, min_tokens=16).keeps(target, None)
    target.hold(conversation(131, 10))  # too short to keep: nothing of worth is lost
    assert StateCache(0, min_tokens=16).keeps(target, None)


def test_a_refused_restore_keeps_the_saved_conversation():
    """A restore llama.cpp refuses (no contiguous cells for it beside others' requests)
    falls back to evaluating the prompt, and the conversation stays saved for later."""
    ann = conversation(140, 120)
    target, cache = FakeModel(), StateCache(4, min_tokens=16)
    target.hold(ann)
    assert cache.park(target, None)
    target.refuse = True
    prompt = np.array(ann + [9], np.int32)
    assert cache.switch_to(target, None, prompt) == 0 and target.n_cached == 0
    target.refuse = False
    assert cache.switch_to(target, None, prompt) == 120


def test_of_equal_heads_the_smallest_state_is_restored():
    system = conversation(150, 30)
    long, short = system + conversation(151, 2000), system + [t + 5000 for t in
                                                               conversation(152, 40)]
    target, cache = FakeModel(), StateCache(4, min_tokens=16)
    for talk in (long, short):
        target.hold(talk)
        assert cache.park(target, None)
    assert cache.switch_to(target, None, np.array(system + [7, 7, 7], np.int32)) == 30
    assert target.n_cached == len(short)  # (the head's copy came from the small one)
