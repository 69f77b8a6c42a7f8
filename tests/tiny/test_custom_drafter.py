"""A Drafter of the library user's own (Engine.configure(drafter=...)) on real llama.cpp (tiny
generated models): verified like lsd's drafters, every proposal checked before it reaches
llama.cpp, and a bad one a clear error that leaves the engine working."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tinymodels
from tinymodels import TINY_CTX, load_tiny

from lsd_local import (
    Draft,
    Drafter,
    DrafterConfig,
    Engine,
    IncompatibleModelsError,
    ParameterError,
    Request,
)

PROMPT = "the cat is"
N = 40


class Oracle(Drafter):
    """Proposes the next k tokens of a known answer (int list, after the prompt); records
    what the generation told it."""

    name = "oracle"

    def __init__(self, answer: list[int], extra: int = 0) -> None:
        self.answer, self.extra = answer, extra  # extra: tokens past k it also returns
        self.calls: list[tuple] = []
        self.n_prompt = 0

    def begin(self, family=None, n_prompt=None) -> None:
        self.calls.append(("begin", n_prompt))
        self.n_prompt = n_prompt

    def propose(self, history, k, sampler=None, rng=None, grammar=None):
        done = len(history) - self.n_prompt
        return Draft(np.asarray(self.answer[done:done + k + self.extra], np.int32))

    def accept(self, n_drafted, n_accept, verify_seconds, grew_logits=False) -> None:
        self.calls.append(("accept", n_drafted, n_accept))

    def end(self, history, n_prompt=None) -> None:
        self.calls.append(("end", len(history), n_prompt))


class Noise(Drafter):
    """Random valid token ids, returned as a plain list (not a Draft)."""

    def __init__(self, n_vocab: int, seed: int) -> None:
        self.rng, self.n_vocab = np.random.default_rng(seed), n_vocab

    def propose(self, history, k, sampler=None, rng=None, grammar=None):
        return [int(t) for t in self.rng.integers(0, self.n_vocab, size=k)]


class Returns(Drafter):
    """Proposes nothing for `after` rounds, then returns one fixed thing (or raises it)."""

    def __init__(self, proposal, after: int = 2) -> None:
        self.proposal, self.after = proposal, after

    def propose(self, history, k, sampler=None, rng=None, grammar=None):
        self.after -= 1
        if self.after >= 0:
            return []
        if isinstance(self.proposal, BaseException):
            raise self.proposal
        return self.proposal


@pytest.fixture(scope="module")
def answer(plain) -> list[int]:
    return plain.generate(PROMPT, max_tokens=N).run().tokens


def test_a_drafter_that_knows_the_answer_is_kept_whole(tiny_pair, answer):
    oracle = Oracle(answer)
    with Engine.load(tiny_pair[0], drafter=oracle, k=5, n_ctx=TINY_CTX) as eng:
        assert eng.drafter_config == DrafterConfig("custom", k=5)
        gen = eng.generate(PROMPT, max_tokens=N).run()
    assert gen.tokens == answer
    assert gen.stats.drafted == gen.stats.accepted_exact > len(answer) // 2
    assert max(gen.stats.draft_lengths) == 5
    sources = gen.stats.draft_sources  # (the last round may have no room to draft: "none")
    assert set(sources) <= {"oracle", "none"} and sources["oracle"] >= gen.stats.rounds - 1
    n_prompt = oracle.calls[0][1]
    assert oracle.calls[0] == ("begin", n_prompt) and n_prompt > 0
    assert oracle.calls[-1] == ("end", n_prompt + len(answer), n_prompt)
    accepts = [c for c in oracle.calls if c[0] == "accept"]
    assert len(accepts) == gen.stats.rounds and all(c[1] == c[2] for c in accepts)


@pytest.mark.parametrize("rule", [{"rule": "strict"}, {"rule": "fly", "theta": math.inf},
                                  {"rule": "asd", "budget": 0.0}])
def test_wrong_drafts_leave_the_answer_plain(tiny_pair, plain, answer, rule):
    """Strict, FLy with theta = inf and ASD with B = 0 keep only what plain decoding writes."""
    with load_tiny(tiny_pair, "none") as eng:
        eng.configure(Noise(eng.target.n_vocab, seed=1), k=3, **rule)
        gen = eng.generate(PROMPT, max_tokens=N).run()
    assert gen.tokens == answer
    assert gen.stats.drafted >= 3 * (gen.stats.rounds - 3)  # (less room at the end)
    assert gen.stats.draft_sources["Noise"] >= gen.stats.rounds - 1


def test_a_proposal_longer_than_asked_is_cut_to_k_and_to_max_tokens(tiny_pair, answer):
    with load_tiny(tiny_pair, "none") as eng:
        eng.configure(Oracle(answer, extra=30), k=4)
        gen = eng.generate(PROMPT, max_tokens=N).run()
        short = eng.generate(PROMPT, max_tokens=7).run()
    assert gen.tokens == answer and max(gen.stats.draft_lengths) == 4
    assert short.tokens == answer[:7] and short.finish_reason == "length"


def one_hot(n_vocab: int, tokens: list[int], scale: float = 1.0) -> np.ndarray:
    rows = np.zeros((len(tokens), n_vocab))
    rows[np.arange(len(tokens)), tokens] = scale
    return rows


def bad_proposals(n_vocab: int) -> list:
    ones = np.array([1, 2], np.int32)
    return [[n_vocab], [-1], [1, 2**40], np.array([[1, 2]]), [1.5], "abc", [True],
            np.array([3], np.uint64) + np.uint64(2**63),
            Draft(ones, probs=np.ones((2, 3))),
            Draft(ones[:1], probs=np.full((1, n_vocab), np.nan)),
            Draft(ones, probs=one_hot(n_vocab, [1, 2], scale=7.0)),  # rows summing to 7
            Draft(ones, probs=one_hot(n_vocab, [1, 3]))]  # its token 2 at probability 0


@pytest.mark.parametrize("which", range(12))
def test_a_bad_proposal_is_a_clear_error_and_the_engine_goes_on(tiny_pair, answer, which):
    with load_tiny(tiny_pair, "none") as eng:
        proposal = bad_proposals(eng.target.n_vocab)[which]
        eng.configure(Returns(proposal), k=4)
        gen = eng.generate(PROMPT, max_tokens=N)
        with pytest.raises(ParameterError, match="drafter 'Returns'") as caught:
            gen.run()
        assert caught.value.param == "drafter" and gen.stats.rounds == 2  # mid-answer
        eng.configure("lookup")  # the same engine, its cache left mid-answer
        assert eng.generate(PROMPT, max_tokens=N).run().tokens == answer


def test_the_drafters_own_exception_ends_the_request_not_the_engine(tiny_pair, answer):
    with load_tiny(tiny_pair, "none") as eng:
        eng.configure(Returns(KeyError("its own bug")), k=4)
        with pytest.raises(KeyError, match="its own bug"):
            eng.generate(PROMPT, max_tokens=N).run()
        eng.configure(Oracle(answer))
        assert eng.generate(PROMPT, max_tokens=N).run().tokens == answer


class Sampled(Drafter):
    """Proposes answer tokens with one-hot distributions (what a greedy drafter samples)."""

    def __init__(self, answer: list[int], n_vocab: int) -> None:
        self.answer, self.n_vocab = answer, n_vocab

    def propose(self, history, k, sampler=None, rng=None, grammar=None):
        tokens = [int(t) for t in history[-k:]]  # whatever: the request samples
        return Draft(np.asarray(tokens, np.int32), probs=one_hot(self.n_vocab, tokens))


def test_probs_are_verified_by_speculative_sampling(tiny_pair, plain, answer):
    """Seeded sampling with a drafter that gives distributions: the same answer as the same
    seed without speculation only by chance, but each run is reproducible and complete."""
    with load_tiny(tiny_pair, "none") as eng:
        eng.configure(Sampled(answer, eng.target.n_vocab), k=3)
        runs = [eng.generate(PROMPT, max_tokens=N, temperature=0.8, seed=7).run()
                for _ in range(2)]
    assert runs[0].tokens == runs[1].tokens and runs[0].finish_reason in ("stop", "length")
    assert runs[0].stats.drafted > 0 and "Sampled" in runs[0].stats.draft_sources


class Peeks(Drafter):
    """Tries what a drafter may and may not do with the history and the grammar."""

    def __init__(self, n_vocab: int) -> None:
        self.n_vocab = n_vocab
        self.seen: list[str] = []

    def propose(self, history, k, sampler=None, rng=None, grammar=None):
        with pytest.raises(ValueError, match="read-only"):
            history[0] = 1
        if grammar is None:  # (a round the grammar forces text in: drafted for free)
            return []
        assert not grammar.allows(10**9) and not grammar.allows(-5)
        with pytest.raises(ParameterError, match="clone"):
            grammar.accept(int(history[-1]))
        row = np.zeros(self.n_vocab, np.float32)
        grammar.mask(row)
        allowed = np.flatnonzero(row == 0)
        copy = grammar.clone()
        copy.accept(int(allowed[0]))  # (advancing a copy leaves the request's state)
        with pytest.raises(ParameterError, match="writeable float row"):
            grammar.mask(np.zeros(3, np.float32))
        self.seen.append("ok")
        return [int(allowed[0])]


def test_a_drafter_sees_history_and_grammar_read_only(tiny_pair):
    with load_tiny(tiny_pair, "none") as eng:
        peeks = Peeks(eng.target.n_vocab)
        want = eng.generate(PROMPT, max_tokens=12, grammar="root ::= [a-z ]+").run().tokens
        eng.configure(peeks, k=2)
        got = eng.generate(PROMPT, max_tokens=12, grammar="root ::= [a-z ]+").run()
    assert got.tokens == want and len(peeks.seen) >= 3


def test_an_empty_proposal_is_a_plain_step(tiny_pair, answer):
    with load_tiny(tiny_pair, "none") as eng:
        eng.configure(Returns([]), k=4)
        gen = eng.generate(PROMPT, max_tokens=N).run()
    assert gen.tokens == answer and gen.stats.drafted == 0


def test_side_by_side_each_sequence_gets_its_own(tiny_pair, answer):
    made: list[Oracle] = []

    def factory() -> Oracle:
        made.append(Oracle(answer))
        return made[-1]

    with load_tiny(tiny_pair, "none", parallel=2) as eng:
        with pytest.raises(ParameterError, match="side by side"):
            eng.configure(Oracle(answer))
        eng.configure(factory, k=3)
        gens = [eng.generate(PROMPT, max_tokens=N) for _ in range(2)]
        rounds = [iter(g) for g in gens]
        while rounds:  # one round each in turn: both requests active at once
            for it in list(rounds):
                if next(it, None) is None:
                    rounds.remove(it)
    assert len(made) == 2 and all(g.tokens == answer for g in gens)
    assert all(g.stats.accepted_exact > len(answer) // 2 for g in gens)
    assert all(sum(c[0] == "begin" for c in o.calls) == 1 for o in made)


def test_side_by_side_one_failing_drafter_fails_its_request_alone(tiny_pair, answer):
    made = iter([Oracle(answer), Returns([10**9])])
    with load_tiny(tiny_pair, "none", parallel=2) as eng:
        eng.configure(lambda: next(made), k=3)
        gens = [eng.generate(PROMPT, max_tokens=N) for _ in range(2)]
        failed: dict[int, ParameterError] = {}
        rounds = dict(enumerate(iter(g) for g in gens))
        while rounds:  # one round each in turn: both requests active at once
            for i, it in list(rounds.items()):
                try:
                    if next(it, None) is None:
                        del rounds[i]
                except ParameterError as error:
                    failed[i] = error
                    del rounds[i]
    assert len(failed) == 1 and str(10**9) in str(next(iter(failed.values())))
    (good,) = (g for i, g in enumerate(gens) if i not in failed)
    assert good.tokens == answer and good.stats.accepted_exact > len(answer) // 2


def test_what_cannot_be_a_custom_drafter_is_refused(tiny_pair, answer):
    with load_tiny(tiny_pair, "none") as eng:
        with pytest.raises(ParameterError, match="of your own"):
            eng.configure("custom")
        with pytest.raises(ParameterError, match="of your own"):
            eng.generate(Request(PROMPT, drafter=DrafterConfig("custom"))).run()
        with pytest.raises(ParameterError, match="fixed k") as caught:
            eng.configure(Oracle(answer), k="auto")
        assert caught.value.param == "k"
        with pytest.raises(ParameterError, match="not a lsd_local.Drafter"):
            eng.configure(lambda: "lookup")
        assert eng.drafter_config.drafter == "none"  # nothing changed by the refusals
        eng.configure(Oracle(answer), k=2)
        eng.configure("lookup")
        eng.configure("custom", k=6)  # the one given before, at another k
        gen = eng.generate(PROMPT, max_tokens=N).run()
    assert gen.tokens == answer and max(gen.stats.draft_lengths) == 6


@pytest.mark.parametrize(("drafter", "options", "words"), [
    ("custom", {}, "of your own"), (DrafterConfig("custom"), {}, "of your own"),
    (Oracle([]), {"k": "auto"}, "fixed k"), (Oracle([]), {"parallel": 2}, "side by side")])
def test_load_refuses_before_it_loads_a_model(tmp_path, drafter, options, words):
    """Refused before loading: the missing model file is never reached."""
    with pytest.raises(ParameterError, match=words):
        Engine.load(tmp_path / "missing.gguf", drafter=drafter, **options)


def test_a_recurrent_target_refuses_a_drafter_of_your_own(tmp_path_factory, answer):
    mamba = tinymodels.make_mamba(tmp_path_factory.mktemp("mamba"))
    with pytest.raises(IncompatibleModelsError, match="drafter='none'"), \
            pytest.warns(UserWarning, match="recurrent"):  # (loaded as auto: plain)
        Engine.load(mamba, drafter=Oracle(answer), n_ctx=TINY_CTX)
    with Engine.load(mamba, drafter="none", n_ctx=TINY_CTX) as eng:
        for drafter in (Oracle(answer), "lookup", "auto"):
            with pytest.raises(IncompatibleModelsError, match="recurrent"):
                eng.configure(drafter)
        assert eng.drafter_config.drafter == "none"
        assert len(eng.generate(PROMPT, max_tokens=8).run().tokens) == 8
