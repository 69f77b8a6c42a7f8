"""The public engine: load a target (and optional draft), then hand out one Generation at a
time (generation.py owns each request from start to close)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from .backend import Grammar, Model, recurrent_message, vocab_compatible
from .config import (
    MAX_TOKENS,
    MIN_P,
    STATE_CACHE_MAX_BYTES,
    TEMPERATURE,
    TOP_K,
    TOP_P,
    DrafterConfig,
    EngineSettings,
    RuleConfig,
    changed_settings,
    engine_settings,
    sampler_settings,
)
from .drafters.auto.learned import request_family
from .drafters.base import Drafter
from .drafters.pool import DrafterPool
from .errors import ContextOverflowError, ParameterError, check
from .generation import EngineParts, Generation, OneAtATime
from .grammars import compile_constraint
from .kernels.warmup import process_warmup
from .loop import LoopSettings
from .models.loading import load_models, load_notices, open_learned
from .statecache import StateCache
from .templates import prompt_text, prompt_tokens
from .text import TextAssembler
from .verify.constrain import grammar_top
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

    def prompt_tokens(self, prompt: str | Sequence[dict]) -> list[int]:
        """Tokenize a raw prompt string, or chat messages through the model's chat template."""
        self._check_open()
        return prompt_tokens(self.chat_template, prompt, self.target.vocab)

    def prompt_text(self, prompt: str | Sequence[dict]) -> str:
        """The prompt as text for a program that adds the BOS token itself (llama.cpp's
        tools): see templates.prompt_text."""
        self._check_open()
        return prompt_text(self.chat_template, prompt, self.target.vocab)

    def generate(self, prompt: str | Sequence[dict], *, max_tokens: int = MAX_TOKENS,
                 temperature: float = TEMPERATURE, top_k: int = TOP_K, top_p: float = TOP_P,
                 min_p: float = MIN_P, seed: int | None = None, stop: Sequence[str] = (),
                 grammar: str | os.PathLike | None = None,
                 json_schema: dict | str | os.PathLike | None = None) -> Generation:
        """Start a generation; iterate it for RoundEvents. `prompt` is raw text, or chat
        messages [{'role', 'content'}] rendered with the GGUF's chat template. One generation
        at a time: EngineBusyError while another one of this engine is unfinished (finish or
        close it first; `with engine.generate(...) as gen:` closes it for you).

        grammar: a shipped grammar name ("json", "json_object", ...: see grammars/), a .gbnf
        file or GBNF text; json_schema: a dict, JSON text or a .json file. Every token the
        output commits is allowed by it, under every rule (a forbidden draft token is a
        mismatch no loose rule may accept)."""
        check(max_tokens >= 0, "max_tokens", f"{max_tokens} (must be >= 0)")
        sampler = sampler_settings(temperature, top_k, top_p, min_p)
        verifier = Verifier(self.rule_config, sampler)
        prompt_ids = self.prompt_tokens(prompt)
        if not prompt_ids:
            raise ParameterError("invalid prompt: it is empty (no tokens)", param="prompt")
        if len(prompt_ids) + 1 > self.target.n_ctx:
            raise ContextOverflowError(
                f"the prompt has {len(prompt_ids)} tokens but the context holds "
                f"{self.target.n_ctx} (raise n_ctx or shorten the prompt)")
        return self._claim.take(lambda: self._generation(  # a busy engine makes nothing
            prompt, prompt_ids, max_tokens, sampler, verifier, seed, stop, grammar,
            json_schema))

    def _generation(self, prompt, prompt_ids: list[int], max_tokens: int, sampler, verifier,
                    seed, stop, grammar, json_schema) -> Generation:
        constraint = self.compile_grammar(grammar, json_schema)
        settings = LoopSettings(max_tokens, self.drafter_config.k_value, sampler,
                                np.random.default_rng(seed), constraint,
                                grammar_top(self.rule_config, sampler, self.target.n_vocab))
        parts = EngineParts(self.target, self.draft_model, self._drafter, self.state_cache,
                            self._check_open, self._claim.give_back)
        return Generation(parts, prompt_ids, settings, verifier,
                          TextAssembler(self.target.vocab.token_bytes, stop),
                          request_family(prompt))

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
        if not self._closed:
            self.save_learned()
            self._closed = True
            active = self._claim.current()
            if active is not None:
                active.close()
        self.target.close()
        if self.draft_model is not None:
            self.draft_model.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
