"""The suffix index over past requests (drafters/suffix.py, suffixstore.py): the numba kernels
against the scanning reference on many random inputs (eviction included), the Python path
used before the kernels load, memory bounded by the capacity, the file (0600, damaged or
foreign files ignored with a notice, concurrent writers), and lookup choosing between the
context and the index."""

from __future__ import annotations

import multiprocessing
import os
import stat
import threading

import numpy as np
import pytest

from lsd_local.config import COPY_RUN
from lsd_local.drafters.lookup import LookupDrafter
from lsd_local.drafters.suffixstore import SuffixIndex
from lsd_local.kernels import jit
from lsd_local.kernels.suffix import SEP, find_reference


def fill(index: SuffixIndex, rng: np.random.Generator, n_docs: int, vocab: int,
         longest: int = 60) -> list[int]:
    """Random documents added; returns everything added, as the reference reads it."""
    added: list[int] = []
    for _ in range(n_docs):
        doc = rng.integers(0, vocab, rng.integers(1, longest)).astype(np.int32)
        index.add(doc)
        added += [SEP] + doc.tolist()
    return added


def query(rng: np.random.Generator, added: list[int], capacity: int, vocab: int) -> np.ndarray:
    """A context that half the time ends with a stretch of kept text (a real match)."""
    context = rng.integers(0, vocab, rng.integers(0, 30)).astype(np.int32)
    if rng.random() < 0.5:
        kept = np.asarray(added[-capacity:], np.int32)
        start = int(rng.integers(0, max(1, len(kept) - 12)))
        context = np.concatenate([context, kept[start:start + rng.integers(2, 14)]])
    return context[context != SEP]


@pytest.mark.parametrize("capacity,vocab,n_docs", [(5000, 20, 300), (300, 6, 80),
                                                   (64, 3, 40), (100_000, 50, 200)])
def test_kernel_equals_the_scanning_reference(capacity, vocab, n_docs):
    rng = np.random.default_rng(capacity)
    index = SuffixIndex(capacity)
    added = fill(index, rng, n_docs, vocab)
    matched = 0
    for _ in range(600):
        context = query(rng, added, index.capacity, vocab)
        k, min_n = int(rng.integers(1, 20)), int(rng.integers(1, 9))
        got = index.find(context, k, min_n)
        want = find_reference(np.asarray(added), index.capacity, context, len(index.table),
                              k, max(min_n, 4))
        assert np.array_equal(got[0], want[0]) and got[1] == want[1], (context, k, min_n)
        matched += len(got[0]) > 0
    assert matched > 50  # the queries found something often enough to mean anything


def kernels_loaded(monkeypatch, loaded: bool) -> None:
    """What kernels/jit.kernel_or sees: the kernels loaded, or not yet (their Python)."""
    ready = threading.Event()
    if loaded:
        ready.set()
    monkeypatch.setattr(jit, "_ready", ready)


def test_python_path_before_the_kernels_load_gives_the_same_answers(monkeypatch):
    rng = np.random.default_rng(1)
    fast, slow = SuffixIndex(400), SuffixIndex(400)
    docs = [rng.integers(0, 8, rng.integers(1, 40)).astype(np.int32) for _ in range(30)]
    for doc in docs:
        fast.add(doc)
    kernels_loaded(monkeypatch, False)
    for doc in docs:
        slow.add(doc)
    assert np.array_equal(fast.ring, slow.ring) and np.array_equal(fast.table, slow.table)
    for _ in range(100):
        context = rng.integers(0, 8, 20).astype(np.int32)
        got = slow.find(context, 8, 4)
        kernels_loaded(monkeypatch, True)
        want = fast.find(context, 8, 4)
        kernels_loaded(monkeypatch, False)
        assert np.array_equal(got[0], want[0]) and got[1] == want[1]


def test_continuations_never_cross_into_another_request():
    index = SuffixIndex(1000)
    index.add(np.array([1, 2, 3, 4, 5, 6], np.int32))
    index.add(np.array([7, 8, 9], np.int32))
    tokens, run = index.find(np.array([9, 1, 2, 3, 4], np.int32), 10, 4)
    assert tokens.tolist() == [5, 6] and run == 4  # not 7, 8, 9 after it
    assert len(index.find(np.array([1, 2, 3, 4, 5, 6], np.int32), 10, 4)[0]) == 0  # (end)


def test_the_continuation_seen_most_often_wins_among_equal_matches():
    index = SuffixIndex(1000)
    for tail in ([50], [60], [60], [70]):
        index.add(np.array([9, 1, 2, 3, 4] + tail, np.int32))
    assert index.find(np.array([1, 2, 3, 4], np.int32), 4, 4)[0].tolist() == [60]
    index.add(np.array([8, 9, 1, 2, 3, 4, 80], np.int32))  # matches one token further back
    assert index.find(np.array([8, 9, 1, 2, 3, 4], np.int32), 4, 4)[0].tolist() == [80]


def test_memory_stays_at_its_bound_through_a_soak():
    rng = np.random.default_rng(2)
    index = SuffixIndex(1 << 14)
    before = index.nbytes
    for _ in range(10_000):  # requests of 1..120 tokens
        index.add(rng.integers(0, 30_000, rng.integers(1, 120)).astype(np.int32))
    assert index.nbytes == before and index.n_tokens == index.capacity
    assert index.total > 30 * index.capacity  # it wrapped many times
    index.add(np.array([5, 6, 7, 8, 9, 10], np.int32))  # and still finds what came last
    assert index.find(np.array([5, 6, 7, 8], np.int32), 4, 4)[0].tolist() == [9, 10]


@pytest.mark.parametrize("capacity", [5000, 300])
def test_the_file_round_trips_with_mode_0600(tmp_path, capacity):
    rng = np.random.default_rng(3)
    index = SuffixIndex(capacity, "vocab-a")
    added = fill(index, rng, 50, 40)
    path = tmp_path / "suffix" / "a.bin"
    index.save(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and not index.changed
    again = SuffixIndex(capacity, "vocab-a")
    assert again.load(path, 40) and not again.changed
    if len(added) <= capacity:  # nothing was evicted: the same text, token for token
        assert np.array_equal(again.live_tokens(), index.live_tokens())
    for _ in range(200):  # either way: the same answers
        context = query(rng, added, capacity, 40)
        got, want = again.find(context, 6, 4), index.find(context, 6, 4)
        if index.total <= capacity or want[1] < 30:  # (a cut first document runs shorter)
            assert got[0].tolist() == want[0].tolist()


@pytest.mark.parametrize("damage,why", [
    (lambda data: data[:-3], "cut short"),
    (lambda data: b"garbage" + data, "not a suffix index"),
    (lambda data: data.replace(b"vocab-a", b"vocab-b"), "another vocabulary"),
    (lambda data: data + np.array([99999], "<i4").tobytes(), "outside the vocabulary"),
])
def test_a_damaged_or_foreign_file_is_ignored_with_a_notice(tmp_path, damage, why):
    index = SuffixIndex(500, "vocab-a")
    index.add(np.arange(20, dtype=np.int32))
    path = tmp_path / "a.bin"
    index.save(path)
    path.write_bytes(damage(path.read_bytes()))
    notices: list[str] = []
    fresh = SuffixIndex(500, "vocab-a")
    assert not fresh.load(path, 40, notices.append)
    assert fresh.total == 0 and len(notices) == 1 and why in notices[0]
    assert not SuffixIndex(500, "vocab-a").load(tmp_path / "missing.bin", 40, notices.append)
    assert len(notices) == 1  # a missing file is no news


def _save_many(path: str, seed: int) -> None:
    index = SuffixIndex(2000, "vocab-a")
    rng = np.random.default_rng(seed)
    for _ in range(40):
        index.add(rng.integers(0, 40, 200).astype(np.int32))
        index.save(path=__import__("pathlib").Path(path))


def test_two_processes_saving_at_once_never_corrupt_the_file(tmp_path):
    path = tmp_path / "a.bin"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_save_many, args=(str(path), seed)) for seed in (1, 2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    notices: list[str] = []
    assert SuffixIndex(2000, "vocab-a").load(path, 40, notices.append) and not notices
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".suffix-")]  # no leftovers


def test_lookup_takes_the_index_only_when_its_match_runs_longer():
    index = SuffixIndex(1000)
    index.add(np.array([10, 11, 12, 13, 14, 15, 16, 17, 18, 19], np.int32))
    drafter = LookupDrafter(12, 4, index=index)
    context = np.array([1, 2, 12, 13, 14, 15, 30, 12, 13, 14, 15], np.int32)
    draft = drafter.propose(context, 4)  # the context's own match (run 4 vs the index's 4)
    assert draft.source == "" and draft.tokens.tolist() == [30, 12, 13, 14]
    longer = np.array([1, 2, 11, 12, 13, 14, 15], np.int32)  # the index matches 5 back
    draft = drafter.propose(longer, 4)
    assert draft.source == "suffix" and draft.tokens.tolist() == [16, 17, 18, 19]
    assert draft.run == 5
    drafter.end(np.array([1, 2, 3, 40, 41, 42, 43, 44], np.int32), n_prompt=3)
    assert drafter.propose(np.array([7, 41, 42, 43, 44], np.int32), 4).source == ""  # (end)
    drafter.use_suffix_index(None)
    assert drafter.propose(longer, 4).source == ""


def test_a_copy_the_context_holds_too_stays_the_contexts():
    """A file an earlier request wrote is re-emitted from this request's prompt: the index's
    match runs longer (it takes in the answer's header too) but says the same tokens, so the
    context's proposal is kept, with its position; where it says something else, the
    index's is taken, but for a copy in the context that the whole answer is part of (an
    edited file: the earlier answer that wrote it may say otherwise)."""
    header, file = [90, 91, 92], list(range(10, 30))
    index = SuffixIndex(1000)
    index.add(np.array(header + file, np.int32))  # the earlier answer, after its header
    drafter = LookupDrafter(12, 4, index=index)
    prompt = [1, 2] + file + [3]
    history = np.array(prompt + header + file[:6], np.int32)  # this answer copies the file
    assert index.find(history, 4, 4)[1] > 6  # the index's match runs past the file
    draft = drafter.propose(history, 4)
    assert draft.source == "" and draft.tokens.tolist() == file[6:10]
    assert draft.origin == 2 + 6 and draft.run == 6
    other = np.array([1, 2] + file[:8] + [4, 4, 4] + [3] + header + file[:6], np.int32)
    draft = drafter.propose(other, 4)  # the context goes on otherwise: the longer match wins
    assert draft.source == "suffix" and draft.tokens.tolist() == file[6:10]
    edited = [1, 2] + file[:16] + [4, 4, 4] + [3] + header  # this request's file is edited
    drafter.begin(None, len(edited))  # (the prompt ends with the template's header)
    copy = np.array(edited + file[:13], np.int32)
    draft = drafter.propose(copy, 4)  # the answer so far copies the file the prompt holds
    assert draft.source == "" and draft.tokens.tolist() == file[13:16] + [4]
    assert index.find(copy, 4, 4)[1] > draft.run >= COPY_RUN


def test_an_answer_asked_for_again_that_quotes_its_prompt_keeps_the_earlier_answer():
    """The same request again: its earlier answer quoted the prompt midway and went on
    otherwise; the context's copy (the quote) started within the answer, so the earlier
    answer, whose match runs over the whole answer so far, is taken."""
    prompt, said = [1, 2] + list(range(10, 30)) + [3, 90, 91], [7, 8, 9]
    index = SuffixIndex(1000)
    index.add(np.array(prompt[-5:] + said + list(range(10, 23)) + [50, 51, 52, 53], np.int32))
    drafter = LookupDrafter(12, 4, index=index)
    history = np.array(prompt + said + list(range(10, 23)), np.int32)
    for n_prompt in (len(prompt), None):  # (None: where the prompt ends is not known)
        drafter.begin(None, n_prompt)
        draft = drafter.propose(history, 4)
        assert draft.source == "suffix" and draft.tokens.tolist() == [50, 51, 52, 53]
    drafter.begin(None, len(prompt) + len(said))  # (had the answer started at the quote)
    assert drafter.propose(history, 4).source == ""


@pytest.mark.parametrize("capacity,n_docs", [(5000, 60), (300, 60), (4096, 1), (64, 0)])
def test_adding_all_at_once_builds_what_adding_each_builds(capacity, n_docs):
    rng = np.random.default_rng(capacity + n_docs)
    docs = [rng.integers(0, 12, rng.integers(1, 90)).astype(np.int32) for _ in range(n_docs)]
    one_by_one, at_once = SuffixIndex(capacity), SuffixIndex(capacity)
    for doc in docs:
        one_by_one.add(doc)
    at_once.add_all(docs)  # (a stream past the capacity takes add()'s path)
    assert at_once.total == one_by_one.total
    for name in ("ring", "chain", "table"):
        assert np.array_equal(getattr(at_once, name), getattr(one_by_one, name)), name


def test_a_file_loads_at_once_not_through_the_python_path(tmp_path, monkeypatch):
    from lsd_local.drafters import suffixstore

    rng = np.random.default_rng(9)
    index = SuffixIndex(1 << 16, "v")
    index.add_all([rng.integers(0, 30_000, 400).astype(np.int32) for _ in range(100)])
    index.save(tmp_path / "big.bin")

    def one_at_a_time(*args):  # ~10 s for a full default index before numba loads
        raise AssertionError("loaded one document at a time")

    one_at_a_time.py_func = one_at_a_time
    monkeypatch.setattr(suffixstore, "index_add", one_at_a_time)
    again = SuffixIndex(1 << 16, "v")
    assert again.load(tmp_path / "big.bin", 30_000)
    assert np.array_equal(again.live_tokens(), index.live_tokens())


def test_engines_in_several_threads_may_share_one_index():
    import threading

    from lsd_local.kernels.warmup import load_kernels_now

    load_kernels_now()  # (the kernels release the GIL: where the threads could collide)
    index = SuffixIndex(1 << 20)
    rng = np.random.default_rng(4)
    docs = [[rng.integers(0, 500, 300).astype(np.int32) for _ in range(300)] for _ in range(4)]

    def writer(mine):
        for doc in mine:
            index.add(doc)
            index.find(doc[:50], 8, 4)

    threads = [threading.Thread(target=writer, args=(mine,)) for mine in docs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert index.total == sum(len(d) + 1 for mine in docs for d in mine)  # no add was lost
    held = index.live_tokens()
    assert sorted(map(len, np.split(held, np.flatnonzero(held == -1))[1:])) == [301] * 1200


def test_auto_tells_its_lookup_where_the_answer_starts():
    """The engine tells the auto drafter the prompt's length; its lookup needs it to tell a
    copy the whole answer is part of from a quote."""
    from lsd_local.drafters.auto.policy import AutoDrafter

    lookup = LookupDrafter(12, 4, index=SuffixIndex(100))
    drafter = AutoDrafter(lookup)
    drafter.begin("family", n_prompt=37)
    assert lookup.n_prompt == 37
    drafter.begin(None)
    assert lookup.n_prompt is None
