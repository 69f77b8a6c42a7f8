"""Fakes for the tests of pure logic: a target serving scripted logits, a drafter proposing
its greedy continuation, a grammar given as a table of allowed tokens. Real llama.cpp behaviour
is tested on the tiny GGUF models (tinymodels.py), never through these."""

from __future__ import annotations

import numpy as np

from lsd_local.drafters.base import Draft, Drafter

V = 16
EOS = 0


class FakeTarget:
    """Logits depend on the last two tokens only, so teacher forcing is exact; the cache is a
    list of tokens whose positions are checked like llama.cpp's."""

    def __init__(self, n_ctx: int = 256, eos_after: tuple[int, int] | None = None) -> None:
        self.n_ctx = n_ctx
        self.cache: list[int] = []
        self.eos_after = eos_after
        self.decode_calls: list[int] = []

    @property
    def n_cached(self) -> int:
        return len(self.cache)

    def next_logits(self, prefix: list[int]) -> np.ndarray:
        key = tuple(prefix[-2:])
        rng = np.random.default_rng(abs(hash(key)) % (2**32))
        row = rng.standard_normal(V).astype(np.float32)
        row[EOS] = 10.0 if key == self.eos_after else -10.0
        return row

    def decode(self, tokens, start_pos, n_rows):
        assert start_pos == len(self.cache), "decode must append at the cache end"
        self.decode_calls.append(len(tokens))
        self.cache.extend(int(t) for t in tokens)
        assert len(self.cache) <= self.n_ctx
        n = len(self.cache)
        if n_rows == 0:
            return np.zeros((0, V), np.float32)
        return np.stack([self.next_logits(self.cache[:n - n_rows + i + 1])
                         for i in range(n_rows)])

    def truncate(self, n):
        del self.cache[n:]

    def reuse_prefix(self, tokens, limit):
        """backend.Model.reuse_prefix: keep the longest common prefix (at most `limit`)."""
        keep = 0
        while keep < min(len(self.cache), len(tokens), limit) and \
                self.cache[keep] == tokens[keep]:
            keep += 1
        self.truncate(keep)
        return keep

    most_logit_rows = 0  # backend.Model's: the loop tells the drafter when a batch grows it

    @property
    def vocab(self):
        return self  # the loop's only vocabulary question is is_eog

    def is_eog(self, token):
        return token == EOS

    def greedy(self, prompt: list[int], n: int) -> list[int]:
        seq = list(prompt)
        for _ in range(n):
            seq.append(int(np.argmax(self.next_logits(seq))))
            if seq[-1] == EOS:
                break
        return seq[len(prompt):]


class ScriptedDrafter(Drafter):
    """Proposes the target's greedy continuation, corrupted at chosen draft positions."""

    name = "scripted"

    def __init__(self, target: FakeTarget, corrupt_every: int = 0) -> None:
        self.target = target
        self.corrupt_every = corrupt_every
        self.calls = 0

    def propose(self, history, k, sampler=None, rng=None, grammar=None):
        self.calls += 1
        tokens = self.target.greedy(history.tolist(), k)[:k]
        tokens = [t for t in tokens]
        if self.corrupt_every and self.calls % self.corrupt_every == 0 and len(tokens) > 1:
            tokens[1] = (tokens[1] + 1) % V or 1
        return Draft(np.array(tokens, np.int32))


class TableGrammar:
    """Allowed tokens depend on how many tokens were accepted: table[n % period] is a bool[V]
    mask. Counts calls so tests can check the cheap path; accept() refuses forbidden tokens as
    llama.cpp would (by aborting)."""

    def __init__(self, table: np.ndarray, accepted: int = 0, calls: dict | None = None) -> None:
        self.table = table
        self.accepted = accepted
        self.calls = calls if calls is not None else {"allows": 0, "mask": 0, "clone": 0}
        self.closed = False

    def allowed(self) -> np.ndarray:
        return self.table[self.accepted % len(self.table)]

    def allows(self, token: int) -> bool:
        self.calls["allows"] += 1
        return bool(self.allowed()[token])

    def accept(self, token: int, checked: bool = False) -> None:
        assert self.allows(token), f"accepted forbidden token {token}"
        self.accepted += 1

    def mask(self, row: np.ndarray) -> None:
        self.calls["mask"] += 1
        row[~self.allowed()] = -np.inf

    def clone(self) -> TableGrammar:
        self.calls["clone"] += 1
        return TableGrammar(self.table, self.accepted, self.calls)

    def close(self) -> None:
        self.closed = True


def fake_generation(target, drafter, prompt, settings, verifier, text, state=None):
    """A real Generation (the request's life: prefill, rounds, text, finish) over a fake
    target: an engine that is always open and takes nothing back. `state`: its RNG and
    grammar (default: seed 0, no grammar)."""
    import numpy as np

    from lsd_local.generation import EngineParts, Generation
    from lsd_local.loop import RoundState

    parts = EngineParts(target, None, drafter, None, check_open=lambda: None,
                        release=lambda gen: None)
    state = state if state is not None else RoundState(np.random.default_rng(0))
    return Generation(parts, list(prompt), settings, state, verifier, text)
