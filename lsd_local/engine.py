"""The public engine: load the models, hand out Generations (generation.py runs each one)."""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from .backend import Grammar, Model
from .chat.harmonyoutput import output_parser
from .chat.templates import prompt_and_tokens, prompt_text, prompt_tokens, tool_use_template
from .chat.tools import banned_opener, tool_plan
from .config import (
    CUSTOM_DRAFTER,
    STATE_CACHE_MAX_BYTES,
    DrafterConfig,
    EngineSettings,
    PenaltySettings,
    RuleConfig,
    changed_settings,
    engine_settings,
)
from .drafters import custom
from .drafters.auto.calibration import (
    before_first_try,
    filler_arrays,
    measure_missing,
    needs_measuring,
)
from .drafters.auto.learned import request_family
from .drafters.base import Drafter
from .drafters.forced import Forced, ForcedDraft
from .drafters.pool import DrafterPool
from .errors import ParameterError, check
from .generation import EngineParts, Generation
from .grammars import compile_constraint, request_grammar
from .limits import check_seed
from .loop import LoopSettings, RoundState
from .models.loading import load_for_engine, load_notices, speculation_refused
from .request import Request, as_request
from .sidebyside import SideBySide, SlotClaim
from .statecache import StateCache, common_prefix, park_others
from .text import TextAssembler
from .verify.constrain import grammar_top
from .verify.penalties import logit_bias_pairs
from .verify.verifier import Verifier


class Engine:
    """Speculative decoding over llama.cpp. Create with `Engine.load(...)`."""

    def __init__(self, target: Model, draft: Model | None, settings: EngineSettings,
                 cross_vocab: bool = False, learned=None, suffix=None) -> None:
        self.target = target
        self.draft_model = draft
        self.chat_template = settings.chat_template or target.chat_template()
        # the GGUF's template for requests with tools, where it names one (Hermes 2 Pro,
        # Hermes 3): transformers and llama.cpp render those with it. A template the user
        # gave serves every request.
        self.tool_template = None if settings.chat_template else tool_use_template(
            target.chat_template("tool_use"))
        self.cross_vocab = cross_vocab  # the draft drafts through text (other vocabulary)
        self.placement = {"target": target.placement}  # where the layers went, per model
        if draft is not None:
            self.placement["draft"] = draft.placement
        self.notices = load_notices(target, draft, cross_vocab)  # the CLI prints these
        self.learned = learned  # what auto learned, across processes (drafters/auto/learned)
        # one pool of drafters per sequence (a drafter holds one request's state); the
        # suffix index and what auto learned are shared
        self._pools = [DrafterPool(draft.slots[seq] if draft is not None else None,
                                   target.slots[seq] if cross_vocab else None, learned,
                                   suffix, target.vocab) for seq in range(target.n_seq)]
        self._pool = self._pools[0]
        self.drafter_config = settings.drafter
        self.rule_config = settings.rule
        self._drafter = self._pool.get(settings.drafter, settings.rule.rule)
        self.state_cache: StateCache | None = None  # see keep_conversations
        self._claim = SlotClaim(target.n_seq)  # a sequence per unfinished generation
        # side by side (parallel > 1): the steps that advance every generation at once
        self._runner = SideBySide(target) if target.n_seq > 1 else None
        self._used_seqs: dict[int, None] = {}  # sequences by last use (save_learned)
        self._calibration: tuple | None = None  # what auto's calibration measured here
        self._closed = False

    @classmethod
    def load(cls, target: str | os.PathLike, draft: str | os.PathLike | None = None, *,
             drafter=None, rule: RuleConfig | str | None = None, **settings) -> Engine:
        """Load the target GGUF (and a draft GGUF; one with another vocabulary drafts through
        text). drafter: "auto", "model", "lookup", "multilevel", "none", a DrafterConfig
        (default "auto": each round whichever the measured costs make fastest), or a
        Drafter of your own (see `configure`); rule: "strict", "fly", "asd" or a
        RuleConfig. Every other keyword is one of config.engine_settings': the drafter's and
        the rule's settings (k, p_min, theta, budget, ...), loading (n_ctx, n_threads,
        n_gpu_layers, device, draft_device, no_repack, ...), rpc, chat_template, remember.
        `placement` says where each model went; docs/library.md has the details."""
        own = custom.is_custom(drafter)  # (loaded with auto and its draft, then the user's)
        spec = engine_settings(drafter="auto" if own else drafter, rule=rule, **settings)
        custom.refuse_before_loading(drafter, spec)
        engine = cls.from_settings(target, draft, spec)
        return custom.given_custom(engine, drafter) if own else engine

    @classmethod
    def from_settings(cls, target: str | os.PathLike, draft: str | os.PathLike | None,
                      spec: EngineSettings) -> Engine:
        """Load with typed settings (what `load` builds from its keywords; `lsd serve` hands
        them to its engine process)."""
        loaded = load_for_engine(target, draft, spec)
        engine = cls(loaded.target, loaded.draft, loaded.settings, loaded.cross_vocab,
                     loaded.learned, loaded.suffix)
        engine.notices.extend(loaded.notices)
        return engine

    def configure(self, drafter=None, rule: RuleConfig | str | None = None, *,
                  fresh_drafter: bool = False, **changes) -> None:
        """Use other drafter and rule settings from the next generation on (chat's /mode).
        Typed settings replace the current ones; a name ("lookup", "fly") or keyword changes
        (k, p_min, theta, ...) apply to them, others keep their values (a new drafter named
        without k: its default K; window=None: FLy's default). Settings used before come
        back with what their drafter learned, unless `fresh_drafter`. Per request:
        Request.drafter and Request.rule.

        `drafter` may be a Drafter of your own (lsd_local.Drafter), asked each round for up
        to a fixed k tokens and verified under the rule like lsd's; side by side, a function
        or class that makes one per sequence. DrafterConfig("custom") then means it."""
        self._check_open()
        with self._steps_lock(), self._claim.idle(  # (in generate's order: no deadlock)
                "finish or close the unfinished generation before configuring this Engine"):
            given = custom.custom_drafters(drafter, self.target.n_vocab, self.target.n_seq) \
                if custom.is_custom(drafter) else []
            dcfg, rcfg = changed_settings(self.drafter_config, self.rule_config,
                                          CUSTOM_DRAFTER if given else drafter, rule, **changes)
            self._check_speculation(dcfg, custom_given=bool(given))
            for pool, own in zip(self._pools[:len(given)], given, strict=True):
                pool.use_custom(own)
            for pool in self._pools[1:]:  # (side by side: each sequence has its own)
                pool.get(dcfg, rcfg.rule, fresh=fresh_drafter)
            self._drafter = self._pool.get(dcfg, rcfg.rule, fresh=fresh_drafter)
            self.drafter_config, self.rule_config = dcfg, rcfg

    def _check_speculation(self, dcfg: DrafterConfig, custom_given: bool = False) -> None:
        if dcfg.drafter != "none" and not self.target.supports_truncate:  # (as load refuses)
            raise speculation_refused(self.target)
        if dcfg.uses_draft_model and self.draft_model is None:
            raise ParameterError(f"invalid drafter: {dcfg.drafter!r} needs a draft model, "
                                 "and this engine was loaded without one", param="drafter")
        if dcfg.drafter == CUSTOM_DRAFTER and not custom_given and self._pool.custom is None:
            raise ParameterError(custom.NONE_GIVEN, param="drafter")
        check(dcfg.adaptive_k or dcfg.k_value + 1 <= self.target.n_batch, "k",  # (a cap: cut)
              f"{dcfg.k_value} (at most n_batch - 1 = {self.target.n_batch - 1})")

    @property
    def drafter(self) -> Drafter | None:
        """The drafter the configuration built (None for plain decoding)."""
        return self._drafter

    def prompt_tokens(self, prompt: str | Sequence[dict], tools: Sequence[dict] | None = None,
                      **template_kwargs) -> list[int]:
        """Tokenize a raw prompt string, or chat messages through the model's chat template
        (given OpenAI `tools` and what else the template reads, e.g. enable_thinking)."""
        self._check_open()
        return prompt_tokens(self.template_for(tools), prompt, self.target.vocab, tools,
                             **template_kwargs)

    def prompt_text(self, prompt: str | Sequence[dict], tools: Sequence[dict] | None = None,
                    **template_kwargs) -> str:
        """The prompt as text for a program that adds the BOS itself (chat.templates)."""
        self._check_open()
        return prompt_text(self.template_for(tools), prompt, self.target.vocab, tools,
                           **template_kwargs)

    def template_for(self, tools: Sequence[dict] | None) -> str | None:
        """The chat template for a request with these tools: the GGUF's "tool_use" one if any."""
        return self.tool_template if tools and self.tool_template else self.chat_template

    @property
    def parallel(self) -> int:
        """How many generations may run side by side (the context's sequences)."""
        return self.target.n_seq

    def generate(self, prompt: str | Sequence[dict] | Request, **options) -> Generation:
        """Start a generation; iterate it for RoundEvents. `prompt`: a Request, or raw text
        or chat messages with Request's fields as keywords (max_tokens, temperature, stop,
        grammar, json_schema, tools, logprobs, reasoning_budget, drafter, rule, ...: see
        Request). An engine loaded with parallel=n runs up to n generations side by side
        (each iterated from any thread); one more is EngineBusyError, as is a second one on
        an engine of one sequence. docs/library.md has it all."""
        request = as_request(prompt, options)
        request.check()
        with self._steps_lock():
            return self._start(request)

    def _steps_lock(self):
        """Side by side, the steps' lock (taken before the sequences' claim, everywhere)."""
        return self._runner.lock if self._runner is not None else contextlib.nullcontext()

    def step(self) -> None:
        """Side by side: one round of every active generation; each one's events wait for
        `Generation.take_events` (`lsd serve`'s engine loop; iterating a generation steps
        too). Alone (parallel=1): nothing."""
        if self._runner is not None:
            self._runner.step()

    def _start(self, request: Request) -> Generation:
        self._check_open()
        dcfg, rcfg = request.drafter or self.drafter_config, request.rule or self.rule_config
        if request.drafter is not None:
            self._check_speculation(dcfg)
        sampler = request.sampler()
        template = self.template_for(request.tools)
        plan = None if request.tools is None else tool_plan(
            template, request.tools, request.tool_choice,
            request.parallel_tool_calls)
        vocab = self.target.vocab
        text, prompt_ids = prompt_and_tokens(template, vocab, self.target.n_ctx,
                                             request.prompt, plan,
                                             request.chat_template_kwargs)
        penalties = PenaltySettings(
            request.repeat_penalty, request.repeat_last_n, request.presence_penalty,
            request.frequency_penalty,
            logit_bias_pairs(request.logit_bias, vocab, banned_opener(plan, vocab)))
        settings = LoopSettings(request.max_tokens, min(dcfg.k_value, self.target.n_batch - 1),
                                sampler, grammar_top(rcfg, sampler, self.target.n_vocab),
                                penalties if penalties.active else None, request.logprobs)
        parser = None if text is None else output_parser(
            template, plan, text, request.reasoning)
        return self._claim.take(
            lambda seq: self._generation(seq, request, prompt_ids, settings, plan, parser,
                                         (dcfg, rcfg)),
            lambda seq: self._fit(seq, prompt_ids))

    def _fit(self, seq: int, prompt_ids: list[int]) -> tuple[int, int]:
        """How well a free sequence suits a prompt: the cached tokens it reuses minus those
        it throws away, then how recently it was used. What the state cache can keep is not
        thrown away (it is saved, or parked when another sequence starts): then only reuse
        counts, and a client's next request goes back to the sequence, and drafter, of its
        last one."""
        slot = self.target.slots[seq]
        cached = slot.cached_tokens
        shared = common_prefix(cached, np.asarray(prompt_ids[:-1], np.int32))
        kept = self.state_cache is not None and self.state_cache.keeps(
            slot, self.draft_model.slots[seq] if self.draft_model is not None else None)
        lost = 0 if kept else len(cached) - shared
        recent = list(self._used_seqs)
        return shared - lost, recent.index(seq) + 1 if seq in recent else 0

    def _generation(self, seq: int, request: Request, prompt_ids: list[int],
                    settings: LoopSettings, plan, parser, speculation: tuple) -> Generation:
        dcfg, rcfg = speculation
        drafter = self._pools[seq].get(dcfg, rcfg.rule)
        target = self.target.slots[seq]
        draft = self.draft_model.slots[seq] if self.draft_model is not None else None
        evaluated = self._calibrate(drafter, target, draft, prompt_ids)
        compiled = request_grammar(self.target, request, plan, parser)
        if compiled is not None and settings.logprobs is not None:
            settings = replace(settings, grammar_top=0)  # exact log-probabilities: full masks
        if compiled is not None and dcfg.forced:  # the grammar's forced tokens, drafted free
            drafter = Forced(drafter, ForcedDraft(compiled.text, compiled.triggers,
                                                  self.target.vocab), len(prompt_ids))
        parts = EngineParts(target, draft, drafter, self.state_cache, self._check_open,
                            self._claim.give_back, evaluated,
                            functools.partial(self._park_idle, seq) if self._runner else None)
        state = RoundState(np.random.default_rng(check_seed(request.seed)), compiled)
        shown = self.target.vocab.showing(parser.markers if parser else ())
        gen = Generation(parts, prompt_ids, settings, state, Verifier(rcfg, settings.sampler),
                         TextAssembler(shown, (*request.stop, *getattr(parser, "stops", ()))),
                         request_family(request.prompt), parser, request.budget,
                         self._runner)
        self._used_seqs.pop(seq, None)  # (by last use: a request that failed to start is none)
        self._used_seqs[seq] = None
        if self._runner is not None:
            self._runner.join(gen)
        return gen

    def _park_idle(self, seq: int, prompt: np.ndarray) -> None:
        """Before sequence `seq` prefills `prompt` (int32[n]), the others no unfinished
        generation holds give their cells back (statecache.park_others)."""
        if self.state_cache is not None:
            with self._claim.lock:  # (no generation takes a sequence meanwhile)
                park_others(self.state_cache, self._claim.free(), seq, prompt, self.target,
                            self.draft_model)

    def calibrate(self) -> bool:
        """Measure now, on filler tokens, what auto measures before it first tries the draft
        model (drafters/auto/calibration.py), so that no request waits for it; `lsd serve`
        does so before it answers. Returns whether it measured: not without a draft model,
        with a drafter other than auto, or when auto's learned state already knows. Empties
        the first sequence's cache; no generation starts meanwhile."""
        self._check_open()
        with self._steps_lock(), self._claim.idle("finish or close the unfinished "
                                                  "generations before calibrating this Engine"):
            return self._calibrate_now()

    def _calibrate_now(self) -> bool:
        drafter = self._drafter
        if self.draft_model is None or not needs_measuring(drafter):
            return False
        target, draft = self.target.slots[0], self.draft_model.slots[0]
        arrays = filler_arrays(target, draft)
        if arrays is None:
            return False
        for slot in (target, draft):
            slot.truncate(0)
        self._pools[0].reset()
        known = (drafter.draft_token_s, drafter.cost.per_query_context_s)
        self._calibration = measure_missing(drafter, target, draft, *arrays,
                                            self._calibration)
        target.truncate(0)  # (the filler prefix is no prompt's)
        return known != (drafter.draft_token_s, drafter.cost.per_query_context_s)

    def _calibrate(self, drafter, target, draft, prompt_ids: list[int]) -> tuple[int, float]:
        """calibration.before_first_try for a generation's drafter and slots (nothing
        without a draft model or once measured); returns (prompt tokens left cached,
        seconds their evaluation took) by this request's measurement."""
        if draft is None or not needs_measuring(drafter):
            return 0, 0.0
        known = self._calibration
        self._calibration = before_first_try(drafter, target, draft, prompt_ids, known)
        return (0, 0.0) if self._calibration is known else self._calibration.evaluated

    def compile_grammar(self, grammar: str | os.PathLike | None = None,
                        json_schema: dict | str | os.PathLike | None = None) -> Grammar | None:
        """The grammar state for a request (None without a constraint); GrammarError with the
        line and column when the grammar or schema is invalid."""
        self._check_open()
        return compile_constraint(self.target, grammar, json_schema)

    def keep_conversations(self, count: int, max_bytes: int = STATE_CACHE_MAX_BYTES) -> None:
        """Keep the KV state of up to `count` other conversations in RAM (at most `max_bytes`
        in all): a prompt that continues one of them is then prefilled from where it
        stopped, even after other prompts (a server's alternating clients). 0 turns it off."""
        self.state_cache = StateCache(count, max_bytes) if count > 0 else None

    def reset(self) -> None:
        """Forget every cached token (the next prompt is evaluated from scratch); the drafters
        forget what they built from them (not what they learned about costs)."""
        self._check_open()
        for model in (self.target, self.draft_model):
            for slot in model.slots if model is not None else ():
                slot.truncate(0)
        for pool in self._pools:
            pool.reset()

    @property
    def suffix_index(self):
        """The suffix index over past requests that lookup searches (drafters/suffixstore.py;
        None: none). Setting another (or None) applies from the next round; a benchmark gives
        each configuration its own."""
        return self._pool.index

    @suffix_index.setter
    def suffix_index(self, index) -> None:
        for pool in self._pools:
            pool.use_suffix_index(index)

    def save_learned(self) -> None:
        """Save what the auto drafters learned and the suffix index (with remember=True; a
        cache dir that cannot be written is a warning, never an error)."""
        try:
            # each sequence's drafters learned apart: the sequences in the order they were
            # last used, so that the latest learning is what stays
            for seq in self._used_seqs or {0: None}:
                self._pools[seq].save(self.rule_config.rule)
            index = self._pool.index
            if index is not None and index.path is not None and index.changed:
                index.save(index.path)
        except OSError as exc:
            warnings.warn(f"cannot save what auto learned: {exc}", UserWarning, stacklevel=2)

    def _check_open(self) -> None:
        if self._closed:  # its models are freed: using them would crash the process
            raise RuntimeError("this Engine is closed; load another one to generate")

    def close(self) -> None:
        """Save what auto learned (remember=True), end an unfinished generation's hold on
        this engine (iterating it then raises), then free both models."""
        # (under the steps' lock: no other thread's decode runs when the models are freed)
        with self._steps_lock():
            try:
                if not self._closed:
                    for active in self._claim.current():
                        active.close()  # (its drafter's end() first, so that it is saved)
                    self._closed = True
                    self.save_learned()
            finally:
                self._closed = True
                self.target.close()
                if self.draft_model is not None:
                    self.draft_model.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

