"""The public engine: load a target (and optional draft), then hand out one Generation at a
time (generation.py owns each request from start to close)."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from .backend import Grammar, Model, recurrent_message, vocab_compatible
from .chat.output import OutputParser
from .chat.templates import opens_thinking, prompt_text, prompt_tokens, render_prompt, tokens_of
from .chat.tools import tool_plan
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
from .drafters.pool import DrafterPool
from .errors import ContextOverflowError, EngineBusyError, ParameterError, check
from .generation import EngineParts, Generation, OneAtATime
from .grammars import compile_constraint, compile_tool_grammar
from .kernels.warmup import process_warmup
from .loop import LoopSettings
from .models.loading import load_models, load_notices, open_learned
from .statecache import StateCache
from .text import TextAssembler
from .verify.constrain import grammar_top
from .verify.penalties import logit_bias_pairs
from .verify.verifier import Verifier


class Engine:
    """Speculative decoding over llama.cpp. Create with `Engine.load(...)`."""

    def __init__(self, target: Model, draft: Model | None, settings: EngineSettings,
                 cross_vocab: bool = False, learned=None) -> None:
        self.target = target
        self.draft_model = draft
        self.chat_template = settings.chat_template or target.chat_template()
        self.cross_vocab = cross_vocab  # the draft drafts through text (other vocabulary)
        self.placement = {"target": target.placement}  # where the layers went, per model
        if draft is not None:
            self.placement["draft"] = draft.placement
        self.notices = load_notices(target, draft, cross_vocab)  # the CLI prints these
        self.learned = learned  # what auto learned, across processes (drafters/auto/learned)
        self._pool = DrafterPool(draft, target if cross_vocab else None, learned)
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
        """Load the target GGUF (and a draft GGUF: one with another vocabulary drafts through
        text, see drafters/crossvocab.py).

        drafter: "auto" (lookup, the draft model if given, or no draft, chosen per round by
        measured cost and acceptance), "model" (needs draft), "lookup", "multilevel" (needs
        draft) or "none", or a DrafterConfig; default "model" with a draft, else "lookup".
        rule: "strict", "fly" or "asd", or a RuleConfig. Every other setting is a keyword of
        config.engine_settings, which builds the typed settings in one place: the drafter's
        (k: an int, "auto" or None for the drafter's default; p_min, max_ngram, min_ngram),
        the rule's (FLy theta/window/entropy_top_k/entropy, ASD gate/max_exceptions/budget),
        loading (load=LoadOptions, or n_ctx, n_threads, n_gpu_layers "auto"/"all"/int,
        device, main_gpu, split_mode, tensor_split, no_repack, verbose; draft_load, or
        draft_n_gpu_layers, draft_device), rpc ("host:port,...": llama.cpp RPC servers the
        target spreads over), chat_template (Jinja, overriding the GGUF's) and remember
        (start auto from what earlier processes learned about these models on this machine
        and save it back on close; off while LSD_NO_STATE is set). `placement` says where
        each model went.
        """
        return cls.from_settings(target, draft, engine_settings(
            has_draft=draft is not None, drafter=drafter, rule=rule, **settings))

    @classmethod
    def from_settings(cls, target: str | os.PathLike, draft: str | os.PathLike | None,
                      spec: EngineSettings) -> Engine:
        """Load with typed settings (what `load` builds from its keywords; `lsd serve` hands
        them to its engine process)."""
        if spec.drafter.uses_draft_model and draft is None:
            raise ParameterError(f"invalid drafter: {spec.drafter.drafter!r} needs a draft "
                                 "model (draft=...)", param="drafter")
        process_warmup().start()  # cached numba kernels load while the models load
        target_model, draft_model, speculate = load_models(target, draft, spec)
        if not speculate:  # auto on a model whose state cannot be cut: plain, and says why
            plain = replace(spec, drafter=replace(spec.drafter, drafter="none", k=None))
            engine = cls(target_model, None, plain)
            engine.notices.append(f"{recurrent_message(target_model)}: plain decoding")
            warnings.warn(engine.notices[-1], UserWarning, stacklevel=3)
            return engine
        cross_vocab = draft_model is not None and not vocab_compatible(target_model, draft_model)
        notices: list[str] = []
        learned = open_learned(target_model, draft_model, spec, notices.append) \
            if spec.remember else None
        engine = cls(target_model, draft_model, spec, cross_vocab, learned)
        engine.notices.extend(notices)
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
                 reasoning: bool = True, chat_template_kwargs: dict | None = None
                 ) -> Generation:
        """Start a generation; iterate it for RoundEvents (docs/library.md). `prompt` is raw
        text, or chat messages rendered with the GGUF's chat template (OpenAI's shape:
        assistant turns with tool_calls, tool turns). One generation at a time:
        EngineBusyError while another one of this engine is unfinished.

        grammar / json_schema: every committed token is allowed by it, under every rule.
        repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty, logit_bias:
        llama.cpp's penalties and biases, on every verified row with the counts that row
        would see. logprobs: None, or n >= 0: each token's log-probability and its n likeliest
        alternatives (RoundEvent.logprobs). tools (OpenAI function specs), tool_choice
        ("auto", "none", "required" or a named function), parallel_tool_calls: calls are read
        out of the answer (Generation.tool_calls) and valid by construction (a grammar from
        the tools' parameters). reasoning: split `<think>` blocks out of the answer.
        chat_template_kwargs: what else the template reads (enable_thinking, ...)."""
        check(max_tokens >= 0, "max_tokens", f"{max_tokens} (must be >= 0)")
        check(logprobs is None or 0 <= logprobs <= MAX_TOP_LOGPROBS, "top_logprobs",
              f"{logprobs} (0 to {MAX_TOP_LOGPROBS})")
        sampler = sampler_settings(temperature, top_k, top_p, min_p)
        verifier = Verifier(self.rule_config, sampler)
        plan = None if tools is None else tool_plan(self.chat_template, tools, tool_choice,
                                                    parallel_tool_calls)
        if plan is not None and plan.mode != "none" and (grammar or json_schema):
            raise ParameterError("invalid grammar: give tools or a grammar, not both",
                                 param="tools")
        text, prompt_ids = self._prompt(prompt, plan, chat_template_kwargs or {})
        bias = logit_bias_pairs(logit_bias, self.target.vocab, self._banned(plan))
        penalties = PenaltySettings(repeat_penalty, repeat_last_n, presence_penalty,
                                    frequency_penalty, bias)
        parser = None if text is None else OutputParser(
            plan.fmt if plan is not None and plan.mode != "none" else None,
            opens_thinking(text), reasoning)
        return self._claim.take(lambda: self._generation(  # a busy engine makes nothing
            prompt, prompt_ids, LoopSettings(
                max_tokens, self.drafter_config.k_value, sampler, np.random.default_rng(seed),
                None, grammar_top(self.rule_config, sampler, self.target.n_vocab),
                penalties if penalties.active else None, logprobs),
            verifier, stop, (grammar, json_schema, plan), parser))

    def _prompt(self, prompt, plan, template_kwargs: dict) -> tuple[str | None, list[int]]:
        """(the rendered chat text or None for a raw prompt, its tokens), checked to fit."""
        if isinstance(prompt, str):
            if plan is not None:
                raise ParameterError("invalid tools: a raw prompt has no chat template to show "
                                     "them; send chat messages", param="tools")
            text, ids = None, self.prompt_tokens(prompt)
        else:
            self._check_open()
            text = render_prompt(self.chat_template, prompt, self.target.vocab,
                                 plan.specs if plan is not None else None, **template_kwargs)
            ids = tokens_of(text, self.target.vocab)
        if not ids:
            raise ParameterError("invalid prompt: it is empty (no tokens)", param="prompt")
        if len(ids) + 1 > self.target.n_ctx:
            raise ContextOverflowError(
                f"the prompt has {len(ids)} tokens but the context holds "
                f"{self.target.n_ctx} (raise n_ctx or shorten the prompt)")
        return text, ids

    def _banned(self, plan) -> tuple[tuple[int, float], ...]:
        """tool_choice "none": the token that would open a call, when it is one, is banned."""
        if plan is None or plan.mode != "none" or not plan.fmt.opener:
            return ()
        opener = self.target.vocab.tokenize(plan.fmt.opener, add_special=False)
        return ((opener[0], -math.inf),) if len(opener) == 1 else ()

    def _generation(self, prompt, prompt_ids: list[int], settings: LoopSettings, verifier,
                    stop, constraint: tuple, parser) -> Generation:
        grammar, json_schema, plan = constraint
        compiled = (compile_tool_grammar(self.target, plan) if plan is not None
                    else self.compile_grammar(grammar, json_schema))
        if compiled is not None and settings.logprobs is not None:
            settings = replace(settings, grammar_top=0)  # exact log-probabilities: full masks
        parts = EngineParts(self.target, self.draft_model, self._drafter, self.state_cache,
                            self._check_open, self._claim.give_back)
        return Generation(parts, prompt_ids, replace(settings, grammar=compiled), verifier,
                          TextAssembler(self.target.vocab.token_bytes, stop),
                          request_family(prompt), parser)

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

    def save_learned(self) -> None:
        """Save what the auto drafters learned (with remember=True; a cache dir that cannot
        be written is a warning, never an error)."""
        try:
            self._pool.save(self.rule_config.rule)
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
