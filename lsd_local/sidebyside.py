"""Several generations of one engine, side by side.

An engine loaded with n sequences (`parallel=n`) gives each generation its own sequence of the
target's context (backend.Slot): its own cache, truncation, grammar, penalties, logprobs and
drafter, over the models' shared weights; the suffix index is shared. `SideBySide.step` runs
one round of every active generation: each drafts its block, one `llama_decode` scores every
block (and the next chunks of prompts still being read), each verifies its own rows. A new
request starts at the next step, whatever the others are doing, so a short answer is never
held behind a long one.

Whoever iterates a generation drives the steps (all generations advance, their events wait in
their outboxes), under one lock: several threads may each iterate their own generation, and
`lsd serve`'s engine process calls `step` itself. Every llama.cpp call on the context happens
under that lock.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from time import perf_counter

import numpy as np

from .backend.slot import DecodeRefused, Slot, decode_blocks
from .errors import EngineBusyError
from .loop import PendingRound
from .stats import RoundEvent

MIN_PROMPT_CHUNK = 64  # prompt tokens a step reads at least while a prompt is being read
# How many more tokens a request is expected to write, to weigh what each commits in a shared
# step: about as many as it has written, plus this (answer lengths are heavy-tailed: the
# longer one has run, the longer it likely runs on), at most what max_tokens leaves. A request
# expected to end soon weighs more, so a long answer's block does not slow a short one's
# steps unless it gains more than that costs (shortest expected work first, as schedulers
# that minimise mean latency do; with lengths unknown, least work done first).
EXPECTED_LENGTH_PRIOR = 32


class SlotClaim:
    """Which sequence each unfinished generation holds (at most one each), across threads.
    Generations are held weakly, so that one dropped without being iterated is collected
    (and closed) as any object is."""

    def __init__(self, n_seq: int) -> None:
        self._lock = threading.RLock()  # (a generation collected under it gives back its sequence)
        self._held: list[weakref.ref | None] = [None] * n_seq

    def _holder(self, seq: int):
        ref = self._held[seq]
        gen = ref() if ref is not None else None
        return gen if gen is not None and not gen.finished else None

    def current(self) -> list:
        """The unfinished generations."""
        return [gen for seq in range(len(self._held)) if (gen := self._holder(seq))]

    @property
    def lock(self) -> threading.RLock:
        """Held while a sequence is taken (under the steps' lock, never before it)."""
        return self._lock

    def free(self) -> list[int]:
        """The sequences no unfinished generation holds."""
        with self._lock:
            return [seq for seq in range(len(self._held)) if self._holder(seq) is None]

    def take(self, make: Callable[[int], object], prefer: Callable[[int], tuple]):
        """make(seq) the next generation on a free sequence (the one `prefer` scores highest:
        the longest cached prefix of its prompt), under the lock; EngineBusyError when every
        sequence is held."""
        with self._lock:
            free = self.free()
            if not free:
                n = len(self._held)
                raise EngineBusyError(
                    "this Engine is already generating: finish or close the first generation "
                    "(gen.close(), or `with engine.generate(...) as gen:`) before starting "
                    "another" if n == 1 else f"all {n} sequences of this Engine are "
                    "generating (parallel=n sets how many): finish or close one first")
            seq = max(free, key=prefer)
            gen = make(seq)
            self._held[seq] = weakref.ref(gen)
            return gen

    @contextlib.contextmanager
    def idle(self, busy: str) -> Iterator[None]:
        """Hold the claim while no generation is unfinished (EngineBusyError(busy) when one
        is): no generation starts on another thread until the block ends."""
        with self._lock:
            if self.current():
                raise EngineBusyError(busy)
            yield

    def give_back(self, gen) -> None:
        """The generation ended: its sequence is free."""
        with self._lock:
            for seq, ref in enumerate(self._held):
                if ref is not None and ref() in (gen, None):
                    self._held[seq] = None


class SideBySide:
    """The active generations of one engine's target and the steps that advance them."""

    def __init__(self, model) -> None:
        self.lock = threading.RLock()
        self.model = model  # the target backend.Model (its slots are the generations')
        # generation.Generation, in arrival order, held weakly: one dropped without being
        # closed is collected (and closed) as any object is, never stepped on for nobody
        self._refs: list[weakref.ref] = []
        # keyed by the generation itself, held weakly: an id() could be a later one's
        self._last_block: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # its
        # last block's size; and the tokens its rounds commit, a moving average (one lucky
        # copy must not make every other request stop drafting for a step)
        self._yields: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @property
    def _members(self) -> list:
        return [gen for ref in self._refs if (gen := ref()) is not None]

    def _has(self, gen) -> bool:
        return any(ref() is gen for ref in self._refs)

    def join(self, gen) -> None:
        """A new generation takes part from the next step."""
        with self.lock:
            self._refs.append(weakref.ref(gen))

    def _remove(self, gen) -> None:
        self._refs = [ref for ref in self._refs if ref() not in (gen, None)]

    def leave(self, gen) -> None:
        """The generation ends now (closed, or its reader left): its sequence is free."""
        with self.lock:
            self._remove(gen)
            gen._close_life()

    def events(self, gen) -> Iterator[RoundEvent]:
        """The generation's rounds as they come; reading them drives every generation."""
        try:
            while True:
                with self.lock:
                    if not gen.outbox and self._has(gen):
                        self.step()
                    items = list(gen.outbox)
                    gen.outbox.clear()
                    live = self._has(gen)
                for item in items:
                    if isinstance(item, BaseException):
                        raise item
                    yield item
                if not live and not items:
                    return
        finally:
            self.leave(gen)

    def step(self) -> None:
        """One round of every active generation (and the next chunk of every prompt still
        being read), scored in as few decodes as n_batch allows (one, unless the blocks
        overflow it). The draft model's decodes for all of them are batched too."""
        with self.lock:
            blocks: list[tuple] = []  # (gen, PendingRound | None, tokens, n_logit_rows)
            members = self._members
            expected = sum(self._last_block.get(g, 1) for g in members)
            others_yield = weighed_others([(expected_length(g), self._yield_of(g))
                                           for g in members])
            planning = []  # (gen, its plan in steps)
            for gen, weighed in zip(members, others_yield, strict=True):
                drafter = gen._parts.drafter
                if drafter is not None:  # what the others will likely add (their last)
                    drafter.batch_tokens = expected - self._last_block.get(gen, 1)
                    drafter.batch_yield, drafter.batch_free = weighed, 0
                steps = self._plan_steps(gen)
                if steps is not None:
                    planning.append((gen, steps))
            planned = self._plan_together(planning)
            for gen, _ in planning:  # (in arrival order, whatever order they finished in)
                if id(gen) in planned:
                    self._planned(gen, planned[id(gen)], blocks)
            self._last_block = weakref.WeakKeyDictionary(
                {b[0]: len(b[2]) for b in blocks if b[1] is not None})
            self._yields = weakref.WeakKeyDictionary(
                {g: n for g, n in self._yields.items() if g in self._last_block})
            # prompts still being read fill the rest, and always move on (a full batch of
            # rounds must not hold a new request back: then they take a decode of their own)
            budget = max(self.model.n_batch - sum(len(b[2]) for b in blocks), MIN_PROMPT_CHUNK)
            for gen in self._members:
                if gen.opened and gen.prefill_left and budget > 0:
                    n = min(gen.prefill_left, budget)
                    blocks.append((gen, None, gen.prompt_chunk(n), 0))
                    budget -= n
            for group in _groups(blocks, self.model.n_batch):
                self._score(group)

    def _yield_of(self, gen) -> float:
        """Tokens the generation is expected to commit this step: as its rounds have (one
        at first), at most what max_tokens leaves, none while its prompt is being read."""
        if gen.prefill_left:
            return 0
        left = gen._settings.max_tokens - gen.stats.generated_tokens
        return max(0, min(self._yields.get(gen, 1), left))

    def _plan_steps(self, gen):
        """The generation's next round in steps (Generation._plan_steps), or None when it has
        none now: its prompt is still being read, or it has ended (a new one starts its
        prefill here)."""
        try:
            if not gen.opened:
                gen._open()
                gen._start_prefill()
                if not gen.prefill_left:
                    gen._prefilled(0)
            if gen.prefill_left or self._done(gen):
                return None
            return gen._plan_steps()
        except Exception as exc:  # noqa: BLE001 - it fails this generation, not the others
            self._fail(gen, exc)
            return None

    def _plan_together(self, planning: list) -> dict:
        """Run the generations' plans side by side: whenever each waits for a draft-model
        decode, those decodes go in one batch (draft_decodes). {id(gen): what its plan
        returned} for those that did not fail."""
        planned: dict[int, object] = {}
        waiting: list[tuple] = []  # (gen, steps, DecodeCall)
        for gen, steps in planning:
            self._advance(gen, steps, None, waiting, planned)
        while waiting:
            current, waiting = waiting, []
            for group, results in draft_decodes(current):
                for (gen, steps, _), rows in zip(group, results, strict=True):
                    if isinstance(rows, BaseException):
                        _abandon(steps)
                        self._fail(gen, rows)
                    else:  # (the rows are used before the next group is decoded)
                        self._advance(gen, steps, rows, waiting, planned)
        return planned

    def _advance(self, gen, steps, rows, waiting: list, planned: dict) -> None:
        """Send a plan its decode's rows (None: start it); it waits again or is done."""
        try:
            call = steps.send(rows)
        except StopIteration as done:
            planned[id(gen)] = done.value
        except Exception as exc:  # noqa: BLE001 - see _plan_steps
            self._fail(gen, exc)
        else:
            waiting.append((gen, steps, call))

    def _planned(self, gen, planned, blocks: list) -> None:
        """A plan's outcome: a block to score, an event written without the model, or
        nothing this time."""
        if isinstance(planned, PendingRound):
            blocks.append((gen, planned, planned.block, len(planned.block)))
        elif planned is not None:
            gen.outbox.append(planned)
            try:
                self._done(gen)
            except Exception as exc:  # noqa: BLE001 - see _plan_steps
                self._fail(gen, exc)

    def _score(self, group: list) -> None:
        """One decode for a group of blocks, then each generation's verification. A decode
        llama.cpp refuses is retried block by block: only the block that fails alone fails
        its generation. One that failed after caching its tokens (NaN logits) fails them
        all: decoding their blocks again would put them in twice."""
        grew = sum(b[3] for b in group) > self.model.most_logit_rows
        total = sum(len(b[2]) for b in group)
        start = perf_counter()
        try:
            views = decode_blocks(self.model, [(gen._parts.target, tokens, n_out)
                                               for gen, _, tokens, n_out in group])
        except DecodeRefused as exc:  # (nothing of it cached)
            if len(group) > 1:  # (one block may be what it refused: each goes on alone)
                for block in group:
                    self._score([block])
            else:
                self._fail(group[0][0], exc)
            return
        except Exception as exc:  # noqa: BLE001 - after its tokens were cached: not again
            for gen, *_ in group:
                self._fail(gen, exc)
            return
        seconds = perf_counter() - start
        for (gen, planned, tokens, _), logits in zip(group, views, strict=True):
            try:
                if planned is None:
                    gen._prefilled(len(tokens))
                    self._done(gen)
                    continue
                if gen._parts.drafter is not None:  # (the decode's size: others' and its)
                    gen._parts.drafter.batch_tokens = total - len(tokens)
                event = gen._finish_round(planned, logits, grew, seconds)
                before = self._yields.get(gen, len(event.tokens))
                self._yields[gen] = (before + len(event.tokens)) / 2
                gen.outbox.append(event)
                self._done(gen)
            except Exception as exc:  # noqa: BLE001 - see _plan
                self._fail(gen, exc)

    def _done(self, gen) -> bool:
        """Leave when its last round is out; True when it has left."""
        if gen._last_round and self._has(gen):
            self._remove(gen)
            gen._close_life()
        return not self._has(gen)

    def _fail(self, gen, exc: BaseException) -> None:
        gen.outbox.append(exc)
        self._remove(gen)
        try:
            gen._close_life()
        except Exception as more:  # noqa: BLE001 - the first failure is the one to tell
            gen.outbox.append(more)


def expected_length(gen) -> int:
    """Tokens the generation is expected to write yet (EXPECTED_LENGTH_PRIOR)."""
    written = gen.stats.generated_tokens
    return max(1, min(gen._settings.max_tokens - written, written + EXPECTED_LENGTH_PRIOR))


def weighed_others(members: list[tuple[int, float]]) -> list[float]:
    """members: (expected length, tokens expected this step) of each generation in a step.
    Per generation, what the others commit, each weighed by how much sooner it is expected to
    end (its length against theirs): a step's worth is its weighed tokens, so a block that
    lengthens the step pays for the delay of those that have least left to write."""
    return [length * sum(tokens / other for i, (other, tokens) in enumerate(members) if i != j)
            for j, (length, _) in enumerate(members)]


def draft_decodes(waiting: list[tuple]) -> Iterator[tuple[list[tuple], list]]:
    """The draft-model decodes that waiting plans ask for ((gen, steps, DecodeCall) each),
    group by group: the calls on sequences (Slots) of one model whose tokens fit its n_batch
    go in one decode, a call on anything else or longer than n_batch alone. Yields (group,
    per call its rows float32[n_rows, V] or the exception that failed it); the rows are views
    valid until the next group is decoded. A decode llama.cpp refuses is tried call by call;
    one that failed after caching its tokens fails every call in it."""
    batchable: dict[int, list[tuple]] = {}
    for entry in waiting:
        call = entry[2]
        if isinstance(call.model, Slot) and len(call.tokens) <= call.model.n_batch:
            batchable.setdefault(id(call.model.model), []).append(entry)
        else:
            yield [entry], [_decode_alone(call)]
    for entries in batchable.values():
        model = entries[0][2].model.model
        for group in _groups(entries, model.n_batch, lambda entry: len(entry[2].tokens)):
            try:
                rows = decode_blocks(model, [(e[2].model, e[2].tokens, e[2].n_rows)
                                             for e in group])
            except DecodeRefused as exc:  # (nothing of it cached)
                if len(group) == 1:
                    yield group, [exc]
                else:  # (one call may be what it refused: each goes on alone)
                    for entry in group:
                        yield [entry], [_decode_alone(entry[2])]
                continue
            except Exception as exc:  # noqa: BLE001 - after its tokens were cached: not again
                yield group, [exc] * len(group)
                continue
            yield group, rows


def _abandon(steps) -> None:
    """Close a plan that cannot go on (its finally clauses run: a grammar clone closed, a
    drafter's batch_tokens put back); what closing it raises does not stop the step."""
    with contextlib.suppress(Exception):  # (the decode's failure is the one to tell)
        steps.close()


def _decode_alone(call) -> np.ndarray | BaseException:
    """A DecodeCall decoded by itself: its rows, or the exception it raised."""
    try:
        return call.model.decode(call.tokens, call.model.n_cached, call.n_rows)
    except Exception as exc:  # noqa: BLE001 - it fails the plan that asked, not the others
        return exc


def _groups(blocks: list, n_batch: int,
            size_of: Callable[[tuple], int] = lambda block: len(block[2])) -> list[list]:
    """The blocks in consecutive groups whose tokens (size_of) fit n_batch each."""
    groups: list[list] = []
    size = n_batch + 1
    for block in blocks:
        if size + size_of(block) > n_batch:
            groups.append([])
            size = 0
        groups[-1].append(block)
        size += size_of(block)
    return groups

