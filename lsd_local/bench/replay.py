"""Noise-free replay of drafting policies on recorded answers.

Timed bench runs on a shared 2-core VM vary by 5-10 % per prompt, more than the differences
between controller settings. A replay takes the plain greedy answer to each prompt (what strict
speculation commits, token for token) and a measured curve t(n) of the target's time to score
n tokens, and runs the real round loop (`loop.step`: the drafter's propose and accept, the K
limit, strict verification) against a target that replays them: strict acceptance is the
length of the draft's agreement with the recorded answer, a round costs t(draft + 1). No model
runs during a replay, so one takes seconds and two settings compare exactly.

What a replay leaves out: drafting time (it only suits drafters without a model: lookup, auto
without a draft model), per-round Python overhead, and numerical differences between batched
and single-token evaluation (strict runs agree with plain on 75-100 % of answers). What it
can add: `growth_s_per_row`, the one-time cost of a batch with more logit rows than any
before it in the process (llama.cpp grows and clears its logits buffer: ~2.7 ms per added
row of Qwen2.5's 151k logits on the 2-core VM), off by default; and, given the target's
vocabulary (`vocab`), text lookup (drafters/textlookup.py), which the engine's lookup runs
where no token n-gram matches: its tokens are spelled by the real ids behind the dense ones.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from ..config import RuleConfig
from ..drafters.auto.calibration import (
    CALIBRATION_SIZES,
    MIN_DOUBLING_CONTEXT,
    SLOPE_SIZE,
    Calibration,
)
from ..drafters.auto.estimators import CostCurve, measure_decode_times
from ..drafters.base import Drafter
from ..drafters.crossvocab import TextCodec
from ..drafters.lookup import LookupDrafter
from ..drafters.textlookup import TextLookup
from ..loop import LoopSettings, RoundState, TokenBuffer, draft_limit, step
from ..verify.verifier import Verifier


@dataclass
class Recorded:
    """One prompt's token ids (chat template applied) and its plain greedy answer."""

    key: str  # "set/id"
    prompt: list[int]
    answer: list[int]
    family: str | None = None  # lsd_local.drafters.auto.learned.request_family of the prompt


@dataclass(frozen=True)
class AnswerEnd:
    """How a recording's answers ended: `eog_token` (the model's end-of-generation id) closes
    an answer that stopped by itself; each was asked for up to `max_tokens`."""

    eog_token: int
    max_tokens: int


@dataclass
class ReplayResult:
    seconds: float  # modelled decode time
    rounds: int
    draft_lengths: list[int] = field(default_factory=list)

    def speedup(self, t1: float, n_tokens: int) -> float:
        """Against plain decoding: n_tokens steps of t1 seconds."""
        return t1 * n_tokens / self.seconds if self.seconds > 0 else 0.0


class FixedLookup(Drafter):
    """Prompt lookup with a fixed K (what `--drafter lookup -k K` does)."""

    name = "lookup"

    def __init__(self, k: int) -> None:
        self.lookup, self.k = LookupDrafter(), k

    def propose(self, history: np.ndarray, k: int, sampler=None, rng=None, grammar=None):
        """history: int32[n] committed tokens; at most min(k, self.k) tokens."""
        return self.lookup.propose(history, min(k, self.k))


class CutLookup(FixedLookup):
    """Prompt lookup's proposal cut where it parts from the recorded answer: the replay
    hands it the answer (`know`), so no round drafts a token that fails and no round that
    could have drafted steps plainly. About the most any choice of K per round could make of
    this lookup's proposals (one per round, token n-grams of the context, and text lookup
    when the replay is given the vocabulary: not the suffix index or other occurrences;
    stopping a block short of a costlier size could gain a little more), to compare a policy
    with: it knows the future."""

    name = "lookup"

    def __init__(self, k: int) -> None:
        super().__init__(k)
        self.sequence = np.zeros(0, np.int32)  # int32[n]: the replay's prompt + answer

    def know(self, sequence: np.ndarray) -> None:
        """sequence: int32[n], the dense ids the replay scores by (ReplayTarget.sequence)."""
        self.sequence = sequence

    def propose(self, history: np.ndarray, k: int, sampler=None, rng=None, grammar=None):
        proposal = super().propose(history, k)
        ahead = self.sequence[len(history):len(history) + len(proposal)]
        parted = np.flatnonzero(ahead != proposal.tokens[:len(ahead)])
        kept = int(parted[0]) if len(parted) else len(ahead)
        return replace(proposal, tokens=proposal.tokens[:kept])


class ReplayTarget:
    """Stands in for the target model in the real round loop (`loop.step`): a block's row i
    puts the recorded next token on top, so strict verification keeps exactly the draft's
    agreement with the recorded answer, and each decode advances a virtual clock by t(n).
    Token ids are made dense (0..distinct-1) so that rows stay small."""

    def __init__(self, sequence: np.ndarray, n_vocab: int, cost: Callable[[int], float],
                 growth_s_per_row: float = 0.0, eog: int = -1):
        self.sequence = sequence  # int32[n]: prompt + recorded answer, dense ids
        self.eog = eog  # the dense id that ends the answer (-1: none does)
        self.n_vocab = n_vocab
        self.cost = cost
        self.growth_s_per_row = growth_s_per_row
        self.most_logit_rows = 0  # the most logit rows one decode asked for
        self.now = 0.0  # virtual seconds spent by decodes
        self.n_cached = 0  # positions a real model would hold (the loop truncates by it)

    def clock(self) -> float:
        return self.now

    def decode(self, tokens: np.ndarray, start_pos: int, n_rows: int) -> np.ndarray:
        """logits float32[n_rows, n_vocab] for the last n_rows of tokens at start_pos.."""
        self.now += self.cost(len(tokens))
        if n_rows > self.most_logit_rows:  # the logits buffer grows (a one-time cost)
            self.now += (n_rows - self.most_logit_rows) * self.growth_s_per_row
            self.most_logit_rows = n_rows
        self.n_cached = start_pos + len(tokens)
        rows = np.zeros((n_rows, self.n_vocab), np.float32)
        first = start_pos + len(tokens) - n_rows  # position of the token row 0 follows
        upcoming = self.sequence[first + 1:first + 1 + n_rows]
        rows[np.arange(len(upcoming)), upcoming] = 1.0
        return rows

    def truncate(self, n: int) -> None:
        """Every block is scored from the recording; only the count a real cache would
        hold is kept (the loop truncates by it)."""
        self.n_cached = min(self.n_cached, n)

    @property
    def vocab(self) -> ReplayTarget:
        """The loop asks the vocabulary whether a token ends the text: `eog` does."""
        return self

    def is_eog(self, token: int) -> bool:
        return token == self.eog


def dense_sequence(prompt: list[int], answer: list[int]) -> tuple[np.ndarray, int]:
    """prompt + answer with ids renumbered 0..distinct-1 (order kept; equal ids stay equal,
    which is all a replayed drafter compares) -> (int32[n], distinct ids)."""
    ids, dense = np.unique(np.array(list(prompt) + list(answer), np.int64),
                           return_inverse=True)
    return dense.astype(np.int32), len(ids)


OTHER_IDS = 4096  # dense ids for tokens a text draft spells that the recording never holds


class DenseVocab:
    """A backend Vocab seen through a replay's dense ids (`real`: int64[distinct], the real
    id of each dense one): what text lookup's codec asks of a vocabulary. Real ids the
    recording lacks get dense ids from len(real) on, which no recorded token equals (a text
    draft reads a few dozen bytes: OTHER_IDS of them per answer is far more than needed)."""

    def __init__(self, vocab, real: np.ndarray) -> None:
        self.vocab, self.real = vocab, real
        self.dense = {int(r): d for d, r in enumerate(real.tolist())}
        self.others: list[int] = []

    def token_bytes_special(self, token: int) -> bytes:
        other = token - len(self.real)
        return self.vocab.token_bytes_special(
            int(self.real[token]) if other < 0 else self.others[other])

    def tokenize_bytes(self, data: bytes, add_special: bool, parse_special: bool) -> list[int]:
        return [self._dense(t) for t in self.vocab.tokenize_bytes(data, add_special,
                                                                  parse_special)]

    def is_eog(self, token: int) -> bool:
        """Whether a dense id's real token ends a generation (the engine's lookup stops its
        drafts at every such token, not only at the answer's own end)."""
        other = token - len(self.real)
        if other >= len(self.others):
            return False
        return self.vocab.is_eog(int(self.real[token]) if other < 0 else self.others[other])

    def _dense(self, token: int) -> int:
        dense = self.dense.get(token)
        if dense is None:
            if len(self.others) == OTHER_IDS:
                raise ValueError(f"more than {OTHER_IDS} tokens outside the recording")
            dense = self.dense[token] = len(self.real) + len(self.others)
            self.others.append(token)
        return dense


def replay(prompt: list[int], answer: list[int], drafter: Drafter | None,
           cost: Callable[[int], float], k_cap: int = 64,
           family: str | None = None, growth_s_per_row: float = 0.0, *,
           end: AnswerEnd | None = None, vocab=None) -> ReplayResult:
    """Run `drafter` (None: plain steps) over `answer` under the strict rule, through the
    real round (`loop.step`) and K limit (`loop.draft_limit`), with ReplayTarget as target;
    the drafter begins a request of `family` as the engine would tell it; growth_s_per_row:
    see the module docstring. `end`: how the recording ended its answers; an answer that
    ends with its end-of-generation token was asked for up to end.max_tokens, so drafts may
    run past it, as in the engine (without `end`, drafts stop at the answer's last token).
    `vocab` (the target's backend Vocab): the drafter's lookup does text lookup too."""
    dense, n_vocab = dense_sequence(prompt, answer)
    spelled = None if vocab is None else _give_text(drafter, vocab, prompt, answer)
    if spelled is not None:
        n_vocab += OTHER_IDS
    ended = end is not None and len(answer) > 0 and answer[-1] == end.eog_token
    target = ReplayTarget(dense, n_vocab, cost, growth_s_per_row, int(dense[-1]) if ended else -1)
    history = TokenBuffer(len(dense) + 1)
    history.set(target.sequence[:len(prompt)])
    max_tokens = max(len(answer), end.max_tokens) if ended else len(answer)
    request = LoopSettings(max_tokens, k_cap, None)
    _hear_end(drafter, spelled.is_eog if spelled is not None else target.is_eog)
    state = RoundState(np.random.default_rng(0))
    verifier = Verifier(RuleConfig(), None)
    if isinstance(drafter, CutLookup):
        drafter.know(target.sequence)
    if drafter is not None:
        drafter.begin(family, len(prompt))
    lengths = []
    while history.n < len(dense):
        k = draft_limit(request, history.n - len(prompt), history.n,
                        len(prompt) + max_tokens + 1)
        done = step(target, drafter, verifier, history, request, state, k, clock=target.clock)
        lengths.append(done.n_drafted)
    if drafter is not None:
        drafter.end(history.view())
    return ReplayResult(target.now, len(lengths), lengths)


def _hear_end(drafter, is_eog) -> None:
    """Tell a replayed drafter's prompt lookup which tokens end a generation, as the engine
    tells its own (drafters/factory.py: the target vocabulary's is_eog); without the
    vocabulary only the answer's own end is known."""
    lookup = _lookup_of(drafter)
    if lookup is not None:
        lookup.is_stop = is_eog


def _give_text(drafter, vocab, prompt: list[int], answer: list[int]) -> DenseVocab | None:
    """Give a replayed drafter's prompt lookup text lookup over this answer's dense ids, and
    an auto drafter the text of its answer (code or prose: drafters/auto/context.py), as the
    engine's factory gives its own; the vocabulary it spells them with (None: the drafter
    has no lookup to give it to)."""
    lookup = _lookup_of(drafter)
    if lookup is None:
        return None
    spelled = DenseVocab(vocab, np.unique(np.array(list(prompt) + list(answer), np.int64)))
    lookup.text = TextLookup(TextCodec(spelled))
    context = getattr(drafter, "context", None)
    if context is not None:
        context.token_bytes = spelled.token_bytes_special
    return spelled


def _lookup_of(drafter) -> LookupDrafter | None:
    """The LookupDrafter a replayed drafter proposes with (itself, auto's, FixedLookup's)."""
    lookup = drafter if isinstance(drafter, LookupDrafter) else getattr(drafter, "lookup", None)
    return lookup if isinstance(lookup, LookupDrafter) else None


def replay_set(records: list[Recorded], make_drafter: Callable[[], object],
               costs: Callable[[Recorded], CostCurve], k_cap: int = 64,
               growth_s_per_row: float = 0.0, end: AnswerEnd | None = None,
               vocab=None) -> list[float]:
    """Per-record speedup over plain decoding, a fresh drafter for each (as `lsd run`)."""
    out = []
    for rec in records:
        curve = costs(rec)
        result = replay(rec.prompt, rec.answer, make_drafter(), curve, k_cap, rec.family,
                        growth_s_per_row, end=end, vocab=vocab)
        out.append(result.speedup(curve(1), len(rec.answer)))
    return out


def measure_cost_curve(model, context: int, sizes: list[int], repeats: int = 5,
                       seed: int = 0) -> CostCurve:
    """t(n) of `model` (backend Model) after `context` cached positions of random tokens."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(100, min(model.n_vocab, 20_000), context).astype(np.int32)
    return measure_decode_times(model, tokens, sizes, repeats)


def calibration_from_curves(curves: dict[int, CostCurve]) -> Calibration:
    """What the engine's calibration (drafters/auto/calibration.py) would time on the machine
    a recording's curves (context -> curve) were measured on: its sizes after the shortest
    recorded context, and the context slope of its block of SLOPE_SIZE between the shortest
    and the longest, as `lsd serve` times it at startup (a bench or `lsd run` process times
    the slope only at its first prompt of 321+ tokens). The draft model's step is left at a
    full target step (a replay runs no draft model, and auto must not choose one). The
    replay's clock charges a block by its prompt's curve, not its position: a calibrated
    drafter that prices the growth with the context drafts a little shorter than the clock
    would reward late in a long answer."""
    if not curves:
        raise ValueError("the recording has no cost curves")
    near, far = min(curves), max(curves)
    timings = tuple((n, curves[near](n), near) for n in CALIBRATION_SIZES)
    slope = None if far == near else min(max(
        0.0, (curves[far](SLOPE_SIZE) - curves[near](SLOPE_SIZE)) / (SLOPE_SIZE * (far - near))),
        curves[near](1) / MIN_DOUBLING_CONTEXT)  # (capped as calibration._far caps it)
    return Calibration(timings, curves[near](1), slope)


def save(path: str | os.PathLike, records: list[Recorded], curves: dict[int, CostCurve],
         end: AnswerEnd | None = None) -> None:
    data = {"records": [asdict(r) for r in records],
            "curves": {str(c): {"sizes": v.sizes, "seconds": v.seconds}
                       for c, v in curves.items()}}
    if end is not None:
        data["end"] = asdict(end)
    Path(path).write_text(json.dumps(data))


def load(path: str | os.PathLike) -> tuple[list[Recorded], dict[int, CostCurve]]:
    data = json.loads(Path(path).read_text())
    records = [Recorded(**r) for r in data["records"]]
    curves = {int(c): CostCurve(v["sizes"], v["seconds"]) for c, v in data["curves"].items()}
    return records, curves


def load_end(path: str | os.PathLike) -> AnswerEnd | None:
    """How the recording's answers ended (None: recorded before that was kept)."""
    end = json.loads(Path(path).read_text()).get("end")
    return AnswerEnd(int(end["eog_token"]), int(end["max_tokens"])) if end else None


def smooth_curves(curves: dict[int, CostCurve], slope: float) -> dict[int, CostCurve]:
    """`curves` (context -> curve) re-priced without steps: t(n) = t(1) (1 + slope (n - 1))
    at the same sizes, each context keeping its own t(1). A GPU's shape, where a block costs
    little more than a step (slope ~0.005-0.02), for asking what a setting tuned on a stepped
    CPU curve would cost there, on the same recorded answers."""
    if not math.isfinite(slope) or slope < 0:
        raise ValueError(f"a curve's slope must be a finite number >= 0, not {slope}")
    return {c: CostCurve(list(v.sizes), [v(1) * (1 + slope * (n - 1)) for n in v.sizes])
            for c, v in curves.items()}


def nearest_curve(curves: dict[int, CostCurve], context: int) -> CostCurve:
    """The curve measured at the context length closest to `context`."""
    return curves[min(curves, key=lambda c: abs(c - context))]
