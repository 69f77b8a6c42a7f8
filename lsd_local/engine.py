"""The public engine: load a target (and optional draft), then generate with speculation."""

from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import replace
from time import perf_counter

import numpy as np

from . import learned
from .backend import Grammar, LoadOptions, Model, schema_to_gbnf, vocab_compatible
from .config import (
    DRAFTERS_KEPT,
    MAX_NGRAM,
    MAX_TOKENS,
    MIN_NGRAM,
    MIN_P,
    N_BATCH,
    N_CTX,
    P_MIN,
    STATE_CACHE_MAX_BYTES,
    TEMPERATURE,
    TOP_K,
    TOP_P,
    DrafterConfig,
    RuleConfig,
    sampler_settings,
)
from .drafters.base import Drafter
from .drafters.factory import make_drafter
from .errors import ContextOverflowError, ParameterError, check
from .grammars import grammar_text, load_schema
from .loading import add_rpc, load_models, open_memory, pair_doubts
from .loop import Request, TokenBuffer, run_rounds
from .statecache import StateCache
from .stats import GenerationStats, RoundEvent
from .templates import prompt_text, prompt_tokens
from .text import TextAssembler
from .verify.constrain import grammar_top
from .verify.verifier import Verifier
from .warmup import process_warmup


class Generation:
    """A running generation: iterate for RoundEvents; `stats`, `text`, `finish_reason` and
    `tokens` are filled in as it goes and final once iteration ends."""

    def __init__(self, rounds: Iterator[RoundEvent], stats: GenerationStats,
                 text: TextAssembler, history: TokenBuffer, n_prompt: int) -> None:
        self._rounds = rounds  # Engine._request: it keeps `stats` up to date
        self.stats = stats
        self._text = text
        self._history = history
        self._n_prompt = n_prompt

    def __iter__(self) -> Iterator[RoundEvent]:
        """The rounds. Leaving the loop early (break, an exception, Ctrl-C) ends the request
        for good: this wrapper dies with the loop, and closing it closes the request, which
        frees the engine at once. Iterating again then yields nothing more."""
        yield from self._rounds

    def close(self) -> None:
        """End the request now, for good (what leaving the loop early does implicitly)."""
        self._rounds.close()

    def run(self) -> Generation:
        """Consume every round; returns self for chaining."""
        for _ in self:
            pass
        return self

    @property
    def text(self) -> str:
        return self._text.released_text

    @property
    def finish_reason(self) -> str | None:
        return self.stats.finish_reason

    @property
    def tokens(self) -> list[int]:
        """Generated token ids (EOS included when the model emitted one)."""
        return self._history.view()[self._n_prompt:].tolist()


class Engine:
    """Speculative decoding over llama.cpp. Create with `Engine.load(...)`."""

    def __init__(self, target: Model, draft: Model | None, drafter: DrafterConfig,
                 rule: RuleConfig, chat_template: str | None = None,
                 cross_vocab: bool = False) -> None:
        self.target = target
        self.chat_template = chat_template or target.chat_template()
        self.draft_model = draft
        self.cross_vocab = cross_vocab  # the draft drafts through text (other vocabulary)
        # what a user should know about the pair (the CLI prints these); doubtful choices are
        # also Python warnings for library users
        info = ([f"draft {draft.path.name} has another vocabulary than {target.path.name}: "
                 "it drafts through text (cross-vocabulary)"] if cross_vocab else [])
        doubts = pair_doubts(target, draft)
        if target.repack.notice:  # lsd turned llama.cpp's extra buffer types off by itself
            doubts.append(target.repack.notice)
        self.placement = {"target": target.placement}  # where the layers went, per model
        if draft is not None:
            self.placement["draft"] = draft.placement
        self.notices = info + doubts
        for notice in doubts:
            warnings.warn(notice, UserWarning, stacklevel=3)
        self.drafter_config = drafter
        self.rule_config = rule
        self._drafter = make_drafter(drafter, draft, target if cross_vocab else None)
        # by settings, most recently used last: each keeps what it learned
        self._drafters = OrderedDict([(drafter, self._drafter)])
        self._busy = False
        # conversations set aside in RAM (None: only the live cache is reused); see
        # `keep_conversations`
        self.state_cache: StateCache | None = None
        self.memory: learned.Memory | None = None  # what auto learned, across processes
        self._closed = False

    @classmethod
    def load(cls, target: str | os.PathLike, draft: str | os.PathLike | None = None, *,
             drafter: str | None = None, rule: str = "strict", k: int | None = None,
             n_ctx: int = N_CTX, n_threads: int | None = None,
             n_gpu_layers: int | str = "auto", draft_n_gpu_layers: int | str | None = None,
             device: str | None = None, draft_device: str | None = None,
             rpc: str | Sequence[str] | None = None, main_gpu: int = 0,
             split_mode: str = "layer", tensor_split: Sequence[float] | None = None,
             p_min: float = P_MIN, max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM,
             chat_template: str | None = None, verbose: bool = False,
             remember: bool = False, no_repack: bool | None = None,
             **rule_params) -> Engine:
        """Load the target GGUF (and a draft GGUF: one with another vocabulary drafts through
        text, see drafters/crossvocab.py).

        drafter: "auto" (lookup, the draft model if given, or no draft, chosen per round by
        measured cost and acceptance), "model" (needs draft), "lookup", "multilevel" (needs
        draft) or "none"; default "model" with a draft, else "lookup". k: an int, "auto"
        (chosen per round) or None (the drafter's default; "auto" for the auto drafter).
        rule: "strict", "fly" or "asd"; FLy takes theta/window/entropy_top_k/entropy, ASD
        gate/max_exceptions/budget (see RuleConfig).
        chat_template (Jinja) overrides the template stored in the GGUF.
        Placement: n_gpu_layers "auto" (default) puts every layer on the GPUs when the
        devices allowed hold one, else none; an integer is llama.cpp's (-1: all). device /
        draft_device: llama.cpp's device names ("CUDA0,CUDA1", "none" = CPU only; default
        every device). rpc: "host:port,..." llama.cpp RPC servers, checked and added as
        devices first; the target spreads over them, the draft stays on local devices
        unless draft_device names them. `placement` says where each model went.
        remember: start the auto drafter from what earlier processes learned about these
        models on this machine, and save it back on close (lsd_local/learned.py; off while
        LSD_NO_STATE is set).
        no_repack: True loads without llama.cpp's extra buffer types (its -nr); None (default)
        turns them off only where the CPU traps AMX (a one-time probe; LSD_NO_REPACK=1 forces
        it off), False keeps them on.
        """
        drafter = drafter or ("model" if draft is not None else "lookup")
        dcfg = DrafterConfig().with_changes(drafter=drafter, k=k, p_min=p_min,
                                            max_ngram=max_ngram, min_ngram=min_ngram)
        rcfg = RuleConfig().with_changes(rule=rule, **rule_params)
        if drafter in ("model", "multilevel") and draft is None:
            raise ParameterError(f"invalid drafter: {drafter!r} needs a draft model (draft=...)",
                                 param="drafter")
        opts = LoadOptions(n_ctx=n_ctx, n_batch=max(N_BATCH, dcfg.k_value + 1),
                           n_threads=n_threads, n_gpu_layers=n_gpu_layers, devices=device,
                           main_gpu=main_gpu, split_mode=split_mode,
                           tensor_split=tuple(tensor_split) if tensor_split else None,
                           no_repack=no_repack, verbose=verbose)
        draft_opts = replace(opts, n_gpu_layers=n_gpu_layers if draft_n_gpu_layers is None
                             else draft_n_gpu_layers, devices=draft_device or device)
        if rpc:
            draft_opts = add_rpc(rpc, draft_opts, draft_device)
        process_warmup().start()  # cached numba kernels load while the models load
        target_model, draft_model, speculate = load_models(target, draft, drafter, opts,
                                                            draft_opts)
        if not speculate:  # auto on a model whose state cannot be cut: plain, and says why
            engine = cls(target_model, None, replace(dcfg, drafter="none", k=None), rcfg,
                         chat_template)
            engine.notices.append(f"{target_model.path.name} is a recurrent/hybrid model whose "
                                  "cache cannot drop rejected tokens: plain decoding")
            warnings.warn(engine.notices[-1], UserWarning, stacklevel=2)
            return engine
        cross_vocab = draft_model is not None and not vocab_compatible(target_model, draft_model)
        engine = cls(target_model, draft_model, dcfg, rcfg, chat_template, cross_vocab)
        if remember and not learned.disabled():
            engine.memory = open_memory(engine, n_threads)
            engine.memory.restore(engine._drafter, dcfg, rcfg.rule)
        return engine

    def configure(self, *, drafter: str | None = None, k: int | str | None = None,
                  rule: str | None = None, p_min: float | None = None,
                  max_ngram: int | None = None, min_ngram: int | None = None,
                  fresh_drafter: bool = False, **rule_params) -> None:
        """Change drafter, K or rule (e.g. chat's /mode) on the loaded models. Unnamed settings
        keep their values, and so does a drafter argument left at None; a new drafter given
        without k gets its own default K; rule parameters are applied as given (window=None
        restores the default window). `fresh_drafter` starts the drafter's learned costs and
        acceptance over even when its settings do not change (each benchmark run)."""
        changes = {name: value for name, value in (("drafter", drafter), ("k", k),
                   ("p_min", p_min), ("max_ngram", max_ngram), ("min_ngram", min_ngram))
                   if value is not None}
        if drafter is not None and k is None:
            changes["k"] = None
        dcfg = self.drafter_config.with_changes(**changes)
        rcfg = self.rule_config.with_changes(**({"rule": rule} if rule else {}), **rule_params)
        self.set_config(dcfg, rcfg, fresh_drafter=fresh_drafter)

    def set_config(self, drafter: DrafterConfig, rule: RuleConfig, *,
                   fresh_drafter: bool = False) -> None:
        """Use these drafter and rule settings from the next generation on (a server's
        per-request settings). A drafter used before with the same settings comes back with
        what it learned (auto's costs and acceptance), unless `fresh_drafter`."""
        self._check_open()
        self.check_config(drafter)
        if fresh_drafter or drafter not in self._drafters:
            self._drafters[drafter] = make_drafter(drafter, self.draft_model,
                                                   self.target if self.cross_vocab else None)
            if self.memory is not None and not fresh_drafter:
                self.memory.restore(self._drafters[drafter], drafter, rule.rule)
        self._drafters.move_to_end(drafter)
        while len(self._drafters) > DRAFTERS_KEPT:  # a client varying p_min or K must not
            self._drafters.popitem(last=False)  # make the engine grow without end
        self._drafter = self._drafters[drafter]
        self.drafter_config = drafter
        self.rule_config = rule

    def check_config(self, drafter: DrafterConfig) -> None:
        """ParameterError when these drafter settings cannot run on the loaded models."""
        if drafter.uses_draft_model and self.draft_model is None:
            raise ParameterError(f"invalid drafter: {drafter.drafter!r} needs a draft model, "
                                 "and this engine was loaded without one", param="drafter")
        check(drafter.k_value + 1 <= self.target.n_batch, "k",
              f"{drafter.k_value} (at most n_batch - 1 = {self.target.n_batch - 1})")

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
        """Start generating. `prompt` is raw text, or chat messages [{'role', 'content'}]
        rendered with the GGUF's chat template. Iterate the result for RoundEvents.

        grammar: a shipped grammar name ("json", "json_object", ...: see grammars/), a .gbnf
        file or GBNF text; json_schema: a dict, JSON text or a .json file. Every token the
        output commits is allowed by it, under every rule (a forbidden draft token is a
        mismatch no loose rule may accept)."""
        check(max_tokens >= 0, "max_tokens", f"{max_tokens} (must be >= 0)")
        sampler = sampler_settings(temperature, top_k, top_p, min_p)
        verifier = Verifier(self.rule_config, sampler)
        if self._busy:
            raise RuntimeError("this Engine is already generating; finish that generation first")
        prompt_ids = self.prompt_tokens(prompt)
        if not prompt_ids:
            raise ParameterError("invalid prompt: it is empty (no tokens)", param="prompt")
        if len(prompt_ids) + 1 > self.target.n_ctx:
            raise ContextOverflowError(
                f"the prompt has {len(prompt_ids)} tokens but the context holds "
                f"{self.target.n_ctx} (raise n_ctx or shorten the prompt)")
        constraint = self.compile_grammar(grammar, json_schema)
        stats = GenerationStats(prompt_tokens=len(prompt_ids))
        text = TextAssembler(self.target.vocab.token_bytes, stop)
        request = Request(max_tokens, self.drafter_config.k_value, sampler,
                          np.random.default_rng(seed), constraint,
                          grammar_top(self.rule_config, sampler, self.target.n_vocab))
        history = TokenBuffer(self.target.n_ctx)
        family = learned.request_family(prompt)  # lookup acceptance is learned per family too
        rounds = self._request(prompt_ids, history, verifier, request, text, stats, family)
        return Generation(rounds, stats, text, history, len(prompt_ids))

    def compile_grammar(self, grammar: str | os.PathLike | None = None,
                        json_schema: dict | str | os.PathLike | None = None) -> Grammar | None:
        """The grammar state for a request (None without a constraint); GrammarError with the
        line and column when the grammar or schema is invalid."""
        self._check_open()
        if grammar is not None and json_schema is not None:
            raise ParameterError("invalid grammar: give a grammar or a JSON schema, not both",
                                 param="grammar")
        if json_schema is not None:
            schema, label = load_schema(json_schema)
            return Grammar.compile(self.target, schema_to_gbnf(schema, label), source=label)
        if grammar is not None:
            text, label = grammar_text(grammar)
            return Grammar.compile(self.target, text, source=label)
        return None

    def _request(self, prompt_ids: list[int], history: TokenBuffer, verifier: Verifier,
                 request: Request, text: TextAssembler, stats: GenerationStats,
                 family: str | None = None) -> Iterator[RoundEvent]:
        """One request from prefill to its last round; every statistic is written here.

        However it ends (finished, an exception, or abandoned: the consumer stops iterating
        and the generator is closed), the `finally` frees the grammar, marks the engine idle
        and lets the kernel warm-up proceed. Nothing restores the KV caches: both models
        record which tokens their caches hold (backend.Model.cached_tokens), and the next
        request's prefill keeps the longest common prefix and drops the rest, so a request cut
        mid-round leaves nothing to repair."""
        # a generation made before close() and iterated after it is refused before the try:
        # nothing has started, so the finally must not end a request
        self._check_open()
        try:
            self._busy = True
            process_warmup().request_started()
            if self._drafter is not None:
                self._drafter.begin(family, rows_seen=self.target.most_logit_rows)
            t0 = perf_counter()
            stats.cached_prompt_tokens = self._prefill(prompt_ids, history)
            stats.prefill_seconds = perf_counter() - t0
            if request.max_tokens == 0:
                stats.finish_reason = "length"
                return
            for event in run_rounds(self.target, self._drafter, verifier, history, request,
                                    text):
                stats.add_round(event)
                stats.finish_reason = event.finish_reason or stats.finish_reason
                yield event
        finally:
            stats.regret_spent = verifier.regret_spent
            self._busy = False
            try:
                if request.grammar is not None:
                    request.grammar.close()
            finally:
                process_warmup().request_ended()

    def _prefill(self, prompt_ids: list[int], history: TokenBuffer) -> int:
        """Evaluate all but the last prompt token, reusing the cached common prefix; return
        how many prompt tokens the cache already held."""
        prompt = np.asarray(prompt_ids, np.int32)
        if self.state_cache is not None:  # another conversation's cache may serve it better
            self.state_cache.switch_to(self.target, self.draft_model, prompt)
        keep = self.target.reuse_prefix(prompt, len(prompt) - 1)
        history.set(prompt)
        self.target.decode(prompt[keep:-1], keep, 0)
        return keep

    def keep_conversations(self, count: int, max_bytes: int = STATE_CACHE_MAX_BYTES) -> None:
        """Keep the KV state of up to `count` other conversations in RAM (at most `max_bytes`
        in all): a prompt that continues one of them is then prefilled from where it
        stopped, even after other prompts (a server's alternating clients). 0 turns it off."""
        self.state_cache = StateCache(count, max_bytes) if count > 0 else None

    def reset(self) -> None:
        """Forget every cached token (the next prompt is evaluated from scratch); the drafter
        forgets what it built from them (not what it learned about costs)."""
        self._check_open()
        self.target.truncate(0)
        for drafter in self._drafters.values():
            if drafter is not None:
                drafter.reset()
        if self.draft_model is not None:
            self.draft_model.truncate(0)

    def save_learned(self) -> None:
        """Save what the auto drafters learned (with remember=True; a cache dir that cannot
        be written is a warning, never an error)."""
        if self.memory is None:
            return
        try:
            self.memory.save(self._drafters, self.rule_config.rule)
        except OSError as exc:
            warnings.warn(f"cannot save the learned state: {exc}", UserWarning, stacklevel=2)

    def _check_open(self) -> None:
        if self._closed:  # its models are freed: using them would crash the process
            raise RuntimeError("this Engine is closed; load another one to generate")

    def close(self) -> None:
        """Save what auto learned (remember=True), then free both models."""
        if not self._closed:
            self.save_learned()
            self._closed = True
        self.target.close()
        if self.draft_model is not None:
            self.draft_model.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

