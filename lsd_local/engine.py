"""The public engine: load a target (and optional draft), then hand out one Generation at a
time (generation.py owns each request from start to close)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from .backend import Grammar, Model
from .chat.output import OutputParser
from .chat.templates import opens_thinking, prompt_and_tokens, prompt_text, prompt_tokens
from .chat.tools import banned_opener, tool_plan
from .config import (
    FREQUENCY_PENALTY,
    MAX_TOKENS,
    MAX_TOP_LOGPROBS,
    MIN_P,
    PRESENCE_PENALTY,
    REPEAT_LAST_N,
    REPEAT_PENALTY,
    STATE_CACHE_MAX_BYTES,
    TEMPERATURE,
    TOP_K,
    TOP_P,
    DrafterConfig,
    EngineSettings,
    PenaltySettings,
    RuleConfig,
    changed_settings,
    engine_settings,
    sampler_settings,
)
from .drafters.auto.learned import request_family
from .drafters.base import Drafter
from .drafters.forced import ForcedDraft
from .drafters.pool import DrafterPool
from .errors import EngineBusyError, ParameterError, check
from .generation import EngineParts, Generation, OneAtATime
from .grammars import compile_constraint, compile_tool_grammar
from .limits import check_seed
from .loop import LoopSettings
from .models.loading import load_for_engine, load_notices
from .statecache import StateCache
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
        self.cross_vocab = cross_vocab  # the draft drafts through text (other vocabulary)
        self.placement = {"target": target.placement}  # where the layers went, per model
        if draft is not None:
            self.placement["draft"] = draft.placement
        self.notices = load_notices(target, draft, cross_vocab)  # the CLI prints these
        self.learned = learned  # what auto learned, across processes (drafters/auto/learned)
        self._pool = DrafterPool(draft, target if cross_vocab else None, learned, suffix,
                                 target.vocab)
        self.drafter_config = settings.drafter
        self.rule_config = settings.rule
        self._drafter = self._pool.get(settings.drafter, settings.rule.rule)
        self.state_cache: StateCache | None = None  # see keep_conversations
        self._claim = OneAtATime()  # one generation at a time, across threads too
        self._closed = False

    @classmethod
    def load(cls, target: str | os.PathLike, draft: str | os.PathLike | None = None, *,
             drafter: DrafterConfig | str | None = None, rule: RuleConfig | str | None = None,
             **settings) -> Engine:
        """Load the target GGUF (and a draft GGUF; one with another vocabulary drafts through
        text). drafter: "auto", "model", "lookup", "multilevel", "none" or a DrafterConfig
        (default "model" with a draft, else "lookup"); rule: "strict", "fly", "asd" or a
        RuleConfig. Every other keyword is one of config.engine_settings': the drafter's and
        the rule's settings (k, p_min, theta, budget, ...), loading (n_ctx, n_threads,
        n_gpu_layers, device, draft_device, no_repack, ...), rpc, chat_template, remember.
        `placement` says where each model went; docs/library.md has the details."""
        return cls.from_settings(target, draft, engine_settings(
            has_draft=draft is not None, drafter=drafter, rule=rule, **settings))

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

    def configure(self, drafter: DrafterConfig | str | None = None,
                  rule: RuleConfig | str | None = None, *, fresh_drafter: bool = False,
                  **changes) -> None:
        """Use other drafter and rule settings from the next generation on (chat's /mode, a
        server's per-request settings). Typed settings replace the current ones; a name
        ("lookup", "fly") or keyword changes (k, p_min, theta, ...) apply to them, unnamed
        settings keep their values, a new drafter given by name without k gets its own
        default K, and window=None restores FLy's default window. Settings used before come
        back with what their drafter learned, unless `fresh_drafter` (each benchmark run)."""
        self._check_open()
        if self._claim.current() is not None:  # what a generation uses is fixed when made
            raise EngineBusyError("finish or close the unfinished generation before "
                                  "configuring this Engine")
        dcfg, rcfg = changed_settings(self.drafter_config, self.rule_config, drafter, rule,
                                      **changes)
        if dcfg.uses_draft_model and self.draft_model is None:
            raise ParameterError(f"invalid drafter: {dcfg.drafter!r} needs a draft model, "
                                 "and this engine was loaded without one", param="drafter")
        check(dcfg.k_value + 1 <= self.target.n_batch, "k",
              f"{dcfg.k_value} (at most n_batch - 1 = {self.target.n_batch - 1})")
        self._drafter = self._pool.get(dcfg, rcfg.rule, fresh=fresh_drafter)
        self.drafter_config, self.rule_config = dcfg, rcfg

    @property
    def drafter(self) -> Drafter | None:
        """The drafter the configuration built (None for plain decoding)."""
        return self._drafter

    def prompt_tokens(self, prompt: str | Sequence[dict], tools: Sequence[dict] | None = None,
                      **template_kwargs) -> list[int]:
        """Tokenize a raw prompt string, or chat messages through the model's chat template
        (given OpenAI `tools` and what else the template reads, e.g. enable_thinking)."""
        self._check_open()
        return prompt_tokens(self.chat_template, prompt, self.target.vocab, tools,
                             **template_kwargs)

    def prompt_text(self, prompt: str | Sequence[dict], tools: Sequence[dict] | None = None,
                    **template_kwargs) -> str:
        """The prompt as text for a program that adds the BOS token itself (llama.cpp's
        tools): see chat.templates.prompt_text."""
        self._check_open()
        return prompt_text(self.chat_template, prompt, self.target.vocab, tools,
                           **template_kwargs)

    def generate(self, prompt: str | Sequence[dict], *, max_tokens: int = MAX_TOKENS,
                 temperature: float = TEMPERATURE, top_k: int = TOP_K, top_p: float = TOP_P,
                 min_p: float = MIN_P, seed: int | None = None, stop: Sequence[str] = (),
                 grammar: str | os.PathLike | None = None,
                 json_schema: dict | str | os.PathLike | None = None,
                 repeat_penalty: float = REPEAT_PENALTY, repeat_last_n: int = REPEAT_LAST_N,
                 presence_penalty: float = PRESENCE_PENALTY,
                 frequency_penalty: float = FREQUENCY_PENALTY, logit_bias=None,
                 logprobs: int | None = None, tools: Sequence[dict] | None = None,
                 tool_choice: str | dict | None = None, parallel_tool_calls: bool = True,
                 reasoning: bool = True, chat_template_kwargs: dict | None = None,
                 reasoning_budget: int | None = None) -> Generation:
        """Start a generation; iterate it for RoundEvents. `prompt`: raw text, or chat
        messages (OpenAI's shape, tool turns included) rendered with the GGUF's template. One
        generation at a time: EngineBusyError while another of this engine is unfinished.
        grammar / json_schema: every committed token is allowed by it, under every rule.
        The penalties and logit_bias (llama.cpp's) act on every verified row with the counts
        that row would see. logprobs: n >= 0 alternatives per token (RoundEvent.logprobs).
        tools, tool_choice, parallel_tool_calls: calls read out of the answer
        (Generation.tool_calls), valid by construction. reasoning: split `<think>` blocks
        out. chat_template_kwargs: what else the template reads. reasoning_budget: at most
        this many tokens inside a `<think>` block, then lsd closes it (None or -1: no limit).
        docs/library.md has it all."""
        check(max_tokens >= 0, "max_tokens", f"{max_tokens} (must be >= 0)")
        check(reasoning_budget is None or reasoning_budget >= -1, "reasoning_budget",
              f"{reasoning_budget} (tokens >= 0, or -1: no limit)")
        check(logprobs is None or 0 <= logprobs <= MAX_TOP_LOGPROBS, "top_logprobs",
              f"{logprobs} (0 to {MAX_TOP_LOGPROBS})")
        sampler = sampler_settings(temperature, top_k, top_p, min_p)
        verifier = Verifier(self.rule_config, sampler)
        plan = None if tools is None else tool_plan(self.chat_template, tools, tool_choice,
                                                    parallel_tool_calls)
        self._check_open()
        vocab = self.target.vocab
        text, prompt_ids = prompt_and_tokens(self.chat_template, vocab, self.target.n_ctx,
                                             prompt, plan, chat_template_kwargs)
        penalties = PenaltySettings(repeat_penalty, repeat_last_n, presence_penalty,
                                    frequency_penalty,
                                    logit_bias_pairs(logit_bias, vocab, banned_opener(plan, vocab)))
        settings = LoopSettings(max_tokens, self.drafter_config.k_value, sampler,
                                np.random.default_rng(check_seed(seed)), None,
                                grammar_top(self.rule_config, sampler, self.target.n_vocab),
                                penalties if penalties.active else None, logprobs)
        parser = None if text is None else OutputParser(
            plan.fmt if plan is not None and plan.mode != "none" else None,
            opens_thinking(text), reasoning, plan.json_names if plan is not None else ())
        return self._claim.take(lambda: self._generation(  # a busy engine makes nothing
            prompt, prompt_ids, settings, verifier, stop, (grammar, json_schema, plan), parser,
            None if reasoning_budget == -1 else reasoning_budget))

    def _generation(self, prompt, prompt_ids: list[int], settings: LoopSettings, verifier,
                    stop, constraint: tuple, parser, reasoning_budget: int | None
                    ) -> Generation:
        grammar, json_schema, plan = constraint
        self._calibrate(prompt_ids)
        if plan is not None and plan.mode != "none" and (grammar or json_schema):
            raise ParameterError("invalid grammar: give tools or a grammar, not both",
                                 param="tools")
        compiled = (compile_tool_grammar(self.target, plan) if plan is not None
                    else self.compile_grammar(grammar, json_schema))
        if compiled is not None and parser is not None and parser.in_reasoning:
            compiled.begin_in_reasoning()  # (the prompt opened <think>: no call in there)
        if compiled is not None and settings.logprobs is not None:
            settings = replace(settings, grammar_top=0)  # exact log-probabilities: full masks
        parts = EngineParts(self.target, self.draft_model, self._drafter, self.state_cache,
                            self._check_open, self._claim.give_back)
        forced = None
        if compiled is not None and self.drafter_config.forced:
            forced = ForcedDraft(compiled.text, compiled.triggers, self.target.vocab)
        settings = replace(settings, grammar=compiled, forced=forced)
        return Generation(parts, prompt_ids, settings, verifier,
                          TextAssembler(self.target.vocab.token_bytes, stop),
                          request_family(prompt), parser, reasoning_budget)

    def _calibrate(self, prompt_ids: list[int]) -> None:
        """Before auto first tries the draft model (nothing learned yet), measure what it and
        the target cost here: a draft model that cannot pay is then never tried (once per
        process and model pair, then kept with what auto learned)."""
        if self.draft_model is None or not getattr(self._drafter, "needs_calibration", False) \
                or self.target.n_cached:  # (never at the cost of a conversation's cache)
            return
        vocab = self.draft_model.vocab  # (its own token ids: it may have another vocabulary)
        filler = vocab.bos_token if vocab.bos_token >= 0 else vocab.eos_token
        n = min(len(prompt_ids), 64, self.target.n_ctx - 16, self.draft_model.n_ctx - 2)
        if n >= 1:  # (a context too small to measure in: auto tries the model to learn)
            self._drafter.calibrate(self.target, self.draft_model,
                                    np.asarray(prompt_ids[:n], np.int32),
                                    np.full(n, filler, np.int32))

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
        self.target.truncate(0)
        self._pool.reset()
        if self.draft_model is not None:
            self.draft_model.truncate(0)

    @property
    def suffix_index(self):
        """The suffix index over past requests that lookup searches (drafters/suffixstore.py;
        None: none). Setting another (or None) applies from the next round; a benchmark gives
        each configuration its own."""
        return self._pool.index

    @suffix_index.setter
    def suffix_index(self, index) -> None:
        self._pool.use_suffix_index(index)

    def save_learned(self) -> None:
        """Save what the auto drafters learned and the suffix index (with remember=True; a
        cache dir that cannot be written is a warning, never an error)."""
        try:
            self._pool.save(self.rule_config.rule)
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
        try:
            if not self._closed:
                active = self._claim.current()
                if active is not None:
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
