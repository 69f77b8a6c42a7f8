"""Every setting of a generation and its default, defined once: the sampler, the verification
rule and the drafter, as frozen dataclasses that validate themselves.

A leaf module: it imports nothing from lsd but `errors`, so that every layer (the pure
verifiers and the backend included) takes its defaults from here. Measured reasons for the
values live in docs/ (pages named below), not in comments that go stale.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path

from .errors import ParameterError, check

# --- context and answer length -----------------------------------------------------------
N_CTX = 4096  # context size when neither the user nor the registry gives one
N_BATCH = 512  # tokens per llama_decode call (at least K + 1: a whole block in one pass)
MAX_PARALLEL = 64  # sequences one context may serve side by side (llama.cpp's LLAMA_MAX_SEQ is 256)
MAX_TOKENS = 256  # tokens per answer: the library and `lsd bench`
CLI_MAX_TOKENS = 512  # tokens per answer: `lsd run` / `lsd chat`
# `lsd serve` answers until EOS, a stop string or a full context unless told (llama-server's
# n_predict = -1, OpenAI's "no max_tokens")

SPLIT_MODES = ("none", "layer", "row")  # how one model spreads over several GPUs


def lsd_cache_dir() -> Path:
    """lsd's folder under the user cache dir ($XDG_CACHE_HOME/lsd or ~/.cache/lsd), read at
    call time: what it keeps between processes (learned.json, cpu-probe.json)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lsd"


# --- conversations kept in RAM (statecache.py; `lsd serve --state-cache`) ------------------
# saved conversations: side by side they also hold those parked from idle sequences (4 of
# them at --parallel 4), which stayed in the KV buffer before, so 8 keep as many warm
STATE_CACHE = 8
STATE_CACHE_MAX_BYTES = 4 << 30  # at most this much RAM for them in all
STATE_CACHE_MIN_TOKENS = 16  # a shorter history is cheaper to evaluate again than to copy

# --- `lsd serve` (docs/server.md) ----------------------------------------------------------
SERVE_HOST = "127.0.0.1"  # loopback: anything wider is the user's explicit choice
SERVE_PORT = 8080  # llama-server's
SERVE_PARALLEL = 4  # requests side by side (--parallel; llama-server's -np)
SERVE_MAX_QUEUE = 16  # requests waiting for the engine; more get 503 + Retry-After
SERVE_MAX_BODY = 8 << 20  # bytes of one request body; more get 413
SERVE_SHUTDOWN_GRACE = 30.0  # seconds in-flight answers get to finish on SIGTERM / Ctrl-C
SERVE_RETRY_AFTER = 1  # seconds a client told "queue full" should wait
LEARNED_SAVE_EVERY = 60.0  # seconds between lsd serve's saves of what auto learned (and at exit)

# --- sampler (llama.cpp's defaults; temperature 0 = greedy) -------------------------------
TEMPERATURE = 0.0
TOP_K = 40  # 0 = off
TOP_P = 0.95  # 1 = off
MIN_P = 0.05  # 0 = off

# --- penalties and logit biases (llama.cpp's penalties sampler; off by default) ----------
REPEAT_PENALTY = 1.0  # 1 = off
REPEAT_LAST_N = 64  # tokens the penalties look back over (llama.cpp's); 0 = off, -1 = all
PRESENCE_PENALTY = 0.0  # OpenAI's range: -2..2
FREQUENCY_PENALTY = 0.0
LOGIT_BIAS_LIMIT = 100.0  # OpenAI's range: -100..100 (or -inf: the token is banned)
MAX_TOP_LOGPROBS = 20  # alternatives per token that logprobs may ask for (OpenAI's limit)

# --- verification rules (docs/how-it-works.md, tuning: `lsd bench --tune`, dev split) -----
RULES = ("strict", "fly", "asd")
ENTROPY_MODES = ("topk", "normalized")
FLY_THETA = 0.6  # FLy entropy threshold; inf = strict
# FLy's window W = min(FLY_WINDOW, K - 1): the W draft tokens after a mismatch must all match
# (vLLM's `fly_window_size` semantics; AMD's reference `win_len` = 6 counts the mismatch itself)
FLY_WINDOW = 4
FLY_ENTROPY_TOP_K = 3  # FLy: entropy over the k_e largest probabilities
FLY_ENTROPY = "topk"  # "topk" (reference code, vLLM) or "normalized" (the paper's H / log V)
ASD_GATE = 2.0  # ASD local gate g on regret / tokens left in the block
ASD_MAX_EXCEPTIONS = 2  # ASD per-block exception cap M
ASD_BUDGET = 6.0  # ASD per-request regret budget B

# --- drafters (docs/benchmarks.md and docs/auto.md) -----------------------------------------
DRAFTERS = ("auto", "model", "lookup", "multilevel", "none")
# the drafter unless one is named (CLI, library, server): auto chooses lookup, the draft model
# or none per round by measured costs (a fixed "model" default ran at 0.55x plain on a CPU)
DEFAULT_DRAFTER = "auto"
# a Drafter of the library user's own (Engine.configure(drafter=MyDrafter())): not one of
# DRAFTERS (no CLI or server request can name it), asked each round for up to its fixed K
CUSTOM_DRAFTER = "custom"
DEFAULT_K = {"model": 4, "multilevel": 4, "lookup": 31, "none": 0,  # fixed K per drafter
             CUSTOM_DRAFTER: 8}  # (unknown acceptance: between the model's K and lookup's)
LOOKUP_CAP = 31  # longest fixed lookup draft: a block of 32 (docs/auto.md, CPU tiles)
# Past a block of 32 auto drafts a copy only in these block sizes, each timed by the
# calibration: a CPU's t(n) has steps there (48 and 64 cost less than one token more), so a
# size between them is dearer than any line through the measured ones (docs/auto.md)
LONG_BLOCKS = (48, 64)
# Auto drafts a lookup block of any size up to this; past it only blocks of LOOKUP_CAP + 1
# (32) and LONG_BLOCKS, each timed by the calibration: the steps are there between 16 and 32
# too (a block of 17-31 costs 10-20 % more than the line through t(16) and t(32) prices it),
# so a copy with 22 tokens left is drafted as 15 and then the rest, not 22 at once
AUTO_DENSE_BLOCKS = 16
AUTO_LONG_BLOCKS = (LOOKUP_CAP + 1, *LONG_BLOCKS)
AUTO_LOOKUP_CAP = max((AUTO_DENSE_BLOCKS, *AUTO_LONG_BLOCKS)) - 1  # longest lookup draft of auto
MODEL_CAP = 8  # longest draft-model draft auto considers
# a lookup match whose copy has run this long (tokens, extended backwards) is a copy, not a
# chance match: auto prices it as one, and lookup keeps one that the whole answer is part of
# over a longer match in past requests (a re-emitted file: docs/drafting.md)
COPY_RUN = 12
AUTO_K_CAP = {"auto": max(AUTO_LOOKUP_CAP, MODEL_CAP), "model": MODEL_CAP,
              "multilevel": MODEL_CAP, "lookup": LOOKUP_CAP, "none": 0}  # K chosen per round
P_MIN = 0.75  # draft model: stop greedy drafting under this top-1 probability (--p-min)
P_MIN_TOP_K = 10  # ... taken over the 10 likeliest tokens, as llama.cpp's draft sampler does
MAX_NGRAM = 12  # prompt lookup: longest n-gram matched
MIN_NGRAM = 6  # prompt lookup: shortest n-gram matched
RUN_CAP = 256  # prompt lookup: how far back a copy's run is measured (auto's copy model)
DRAFTERS_KEPT = 4  # drafter settings whose learned statistics an Engine keeps (drafters/pool.py)
# the suffix index over past requests (kernels/suffix.py, docs/drafting.md): tokens kept
# (4 bytes each in the ring, 8 in its hash chain, plus a table of as many 8-byte slots:
# 1 Mi tokens = 20 MiB), and how much of each prompt's end is kept with its answer
SUFFIX_TOKENS = 1 << 20
SUFFIX_PROMPT_TAIL = 64
# text lookup (drafters/textlookup.py): the shortest and longest end of the text matched
# (bytes), where token lookup finds nothing; the match must hold this many letters or digits
TEXT_LOOKUP_MIN_CHARS = 5
TEXT_LOOKUP_MAX_CHARS = 32
TEXT_LOOKUP_MIN_ALNUM = 4
# A text match is weaker evidence than a token n-gram: short drafts. Its first tokens bridge a
# copy's other tokenization (token lookup takes over after); a match of a few characters in
# new text is mostly wrong at once, and a longer draft only costs more then (replayed with
# text lookup modelled: HumanEval +3.1 %, code edits +2.2 % against 8; docs/auto.md)
TEXT_LOOKUP_MAX_TOKENS = 3


class _Settings:
    """Frozen settings that validate themselves when made (ParameterError names the bad
    field); `with_changes` derives new ones."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        raise NotImplementedError

    def with_changes(self, **changes):
        """A validated copy with the named fields changed (ParameterError for unknown names)."""
        unknown = set(changes) - {f.name for f in fields(self)}  # type: ignore[arg-type]
        if unknown:
            raise ParameterError(f"unknown parameter(s): {', '.join(sorted(unknown))}")
        return replace(self, **changes)  # validated by __post_init__


@dataclass(frozen=True)
class SamplerSettings(_Settings):
    """Sampler chain applied to target and draft alike (llama.cpp order: top-k, top-p,
    min-p on the temperature-1 distribution, then temperature). Exists only for sampling:
    greedy decoding has none (see `sampler_settings`)."""

    temperature: float
    top_k: int = TOP_K
    top_p: float = TOP_P
    min_p: float = MIN_P

    def validate(self) -> None:
        check(math.isfinite(self.temperature) and self.temperature > 0, "temperature",
              f"{self.temperature} (must be > 0 to sample)")
        check(self.top_k >= 0, "top_k", f"{self.top_k} (must be >= 0; 0 = off)")
        check(0 < self.top_p <= 1, "top_p", f"{self.top_p} (must be within (0, 1])")
        check(0 <= self.min_p <= 1, "min_p", f"{self.min_p} (must be within [0, 1])")


@dataclass(frozen=True)
class PenaltySettings(_Settings):
    """Repetition penalties and logit biases, as llama.cpp applies them (verify/penalties.py):
    over the last repeat_last_n tokens of prompt and answer, a token seen c times has its
    logit divided by repeat_penalty (multiplied when not positive), then lowered by
    c * frequency_penalty + presence_penalty; logit_bias adds (token id, bias) pairs first."""

    repeat_penalty: float = REPEAT_PENALTY
    repeat_last_n: int = REPEAT_LAST_N
    presence_penalty: float = PRESENCE_PENALTY
    frequency_penalty: float = FREQUENCY_PENALTY
    logit_bias: tuple[tuple[int, float], ...] = ()  # one entry per token id

    @property
    def penalizes(self) -> bool:
        return self.repeat_last_n != 0 and (self.repeat_penalty != 1.0 or bool(
            self.presence_penalty) or bool(self.frequency_penalty))

    @property
    def active(self) -> bool:
        """Whether anything is applied at all (else the rows are left alone)."""
        return self.penalizes or bool(self.logit_bias)

    def validate(self) -> None:
        check(math.isfinite(self.repeat_penalty) and self.repeat_penalty > 0, "repeat_penalty",
              f"{self.repeat_penalty} (must be > 0; 1 = off)")
        check(self.repeat_last_n >= -1, "repeat_last_n",
              f"{self.repeat_last_n} (must be >= -1; 0 = off, -1 = every token)")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            check(math.isfinite(value) and -2.0 <= value <= 2.0, name,
                  f"{value} (must be within [-2, 2])")
        ids = [token for token, _ in self.logit_bias]
        check(len(set(ids)) == len(ids), "logit_bias", "a token id is given twice")
        for token, bias in self.logit_bias:
            check(isinstance(token, int) and token >= 0, "logit_bias",
                  f"{token!r} (token ids are integers >= 0)")
            check(bias == -math.inf or (math.isfinite(bias) and abs(bias) <= LOGIT_BIAS_LIMIT),
                  "logit_bias", f"{bias} for token {token} (within [-100, 100], or -inf)")


def sampler_settings(temperature: float = TEMPERATURE, top_k: int = TOP_K,
                     top_p: float = TOP_P, min_p: float = MIN_P) -> SamplerSettings | None:
    """Validated sampler settings; None means greedy (temperature 0)."""
    check(math.isfinite(temperature) and temperature >= 0, "temperature",
          f"{temperature} (must be >= 0; 0 = greedy)")
    settings = SamplerSettings(temperature or 1.0, top_k, top_p, min_p)  # checks the rest
    return None if temperature == 0 else settings


def check_fly(theta: float, window: int, top_k: int, entropy: str) -> None:
    """Validate FLy parameters (ParameterError names the bad one)."""
    check(theta >= 0, "theta", f"{theta} (entropy threshold must be >= 0; inf = strict)")
    check(window >= 1, "window", f"{window} (must be >= 1)")
    check(top_k >= 1, "entropy top_k", f"{top_k} (must be >= 1)")
    check(entropy in ENTROPY_MODES, "entropy", f"{entropy!r} (choose topk or normalized)")


def check_asd(gate: float, max_exceptions: int, budget: float) -> None:
    """Validate ASD parameters (ParameterError names the bad one)."""
    check(gate >= 0, "gate", f"{gate} (must be >= 0)")
    check(max_exceptions >= 0, "max_exceptions", f"{max_exceptions} (must be >= 0)")
    check(budget >= 0, "budget", f"{budget} (must be >= 0)")


@dataclass(frozen=True)
class RuleConfig(_Settings):
    """Which verification rule to use and its parameters."""

    rule: str = "strict"
    theta: float = FLY_THETA  # FLy entropy threshold; inf = strict
    window: int | None = None  # FLy deferred window W; None = min(FLY_WINDOW, K-1)
    entropy_top_k: int = FLY_ENTROPY_TOP_K  # FLy: entropy over the k_e largest probabilities
    entropy: str = FLY_ENTROPY  # FLy: "topk" (reference code, vLLM) or "normalized" (paper)
    gate: float = ASD_GATE  # ASD local gate g
    max_exceptions: int = ASD_MAX_EXCEPTIONS  # ASD per-block exception cap M
    budget: float = ASD_BUDGET  # ASD per-request regret budget B

    def validate(self) -> None:
        """Raise ParameterError naming the first invalid parameter."""
        check(self.rule in RULES, "rule", f"{self.rule!r} (choose one of {', '.join(RULES)})")
        check_fly(self.theta, 1 if self.window is None else self.window, self.entropy_top_k,
                  self.entropy)
        check_asd(self.gate, self.max_exceptions, self.budget)


@dataclass(frozen=True)
class DrafterConfig(_Settings):
    """Which drafter to use and how far it drafts."""

    drafter: str = DEFAULT_DRAFTER
    k: int | str | None = None  # int, "auto" (chosen per round) or None: DEFAULT_K[drafter]
    p_min: float = P_MIN  # draft model: stop drafting under this top-1 probability
    max_ngram: int = MAX_NGRAM  # prompt lookup: longest n-gram to match
    min_ngram: int = MIN_NGRAM  # prompt lookup: shortest n-gram to match
    forced: bool = True  # under a grammar, draft the text it forces first (drafters/forced.py)
    text_lookup: bool = True  # lookup: match the text where no token n-gram matches

    @property
    def adaptive_k(self) -> bool:
        """K chosen per round by the cost model (k="auto", or the auto drafter's default)."""
        return self.k == "auto" or (self.drafter == "auto" and self.k is None)

    @property
    def k_value(self) -> int:
        """The largest draft per round (the cap when K is chosen per round)."""
        if self.adaptive_k:
            return AUTO_K_CAP[self.drafter]
        return DEFAULT_K[self.drafter] if self.k is None else self.k

    @property
    def uses_draft_model(self) -> bool:
        return self.drafter in ("model", "multilevel")

    def validate(self) -> None:
        check(self.drafter in DRAFTERS or self.drafter == CUSTOM_DRAFTER, "drafter",
              f"{self.drafter!r} (choose one of {', '.join(DRAFTERS)}, or a Drafter)")
        check(self.drafter != CUSTOM_DRAFTER or self.k != "auto", "k",
              "'auto' (a Drafter of your own is asked for up to a fixed k each round: "
              "choosing K by cost is auto's, over lsd's drafters)")
        check(self.k is None or self.k == "auto" or (isinstance(self.k, int) and self.k >= 1),
              "k", f"{self.k!r} (an integer >= 1 or 'auto')")
        check(0.0 <= self.p_min <= 1.0, "p_min", f"{self.p_min} (must be within [0, 1])")
        check(self.max_ngram >= 1, "max_ngram", f"{self.max_ngram} (must be >= 1)")
        check(1 <= self.min_ngram <= self.max_ngram, "min_ngram",
              f"{self.min_ngram} (must be within 1..max_ngram)")
        check(isinstance(self.forced, bool), "forced", f"{self.forced!r} (true or false)")
        check(isinstance(self.text_lookup, bool), "text_lookup",
              f"{self.text_lookup!r} (true or false)")


@dataclass(frozen=True)
class LoadOptions(_Settings):
    """How to load one model: context, threads, GPU placement, llama.cpp's buffer types."""

    n_ctx: int = N_CTX
    n_batch: int = N_BATCH
    n_seq: int = 1  # sequences side by side in one context (each holds up to n_ctx)
    n_threads: int | None = None  # None: physical cores
    n_gpu_layers: int | str = "auto"  # "auto"/"all": every layer when a GPU may take them
    devices: str | None = None  # llama.cpp's --device: "CUDA0,CUDA1", "none"; None: all
    main_gpu: int = 0
    split_mode: str = "layer"
    tensor_split: tuple[float, ...] | None = None
    # llama.cpp's extra buffer types (repacked weights, AMX): None decides per machine (off
    # where the CPU traps AMX: backend/cpu_probe.py), True turns them off (-nr), False on
    no_repack: bool | None = None
    verbose: bool = False

    def validate(self) -> None:
        check(self.n_ctx >= 8, "n_ctx", f"{self.n_ctx} (must be at least 8)")
        check(self.n_batch >= 1, "n_batch", f"{self.n_batch} (must be at least 1)")
        check(1 <= self.n_seq <= MAX_PARALLEL, "parallel",
              f"{self.n_seq} (1 to {MAX_PARALLEL} sequences)")
        check(self.n_threads is None or self.n_threads >= 1, "n_threads", f"{self.n_threads}")
        check(self.split_mode in SPLIT_MODES, "split_mode",
              f"{self.split_mode!r} (choose one of {', '.join(SPLIT_MODES)})")
        check(isinstance(self.n_gpu_layers, int) or self.n_gpu_layers in ("auto", "all"),
              "n_gpu_layers", f"{self.n_gpu_layers!r} (an integer, 'auto' or 'all')")


@dataclass(frozen=True)
class EngineSettings:
    """Everything `Engine.load` takes besides the model files (plain values that cross to
    `lsd serve`'s engine process); `engine_settings` builds it from typed settings or
    keyword conveniences."""

    drafter: DrafterConfig
    rule: RuleConfig
    load: LoadOptions  # the target's
    draft_load: LoadOptions  # the draft model's
    rpc: tuple[str, ...] = ()  # llama.cpp RPC servers "host:port", added as devices first
    draft_device_given: bool = False  # draft_load.devices was chosen (else local with RPC)
    chat_template: str | None = None  # Jinja text overriding the GGUF's template
    remember: bool = False  # start auto from what earlier processes learned, save it back
    # tokens of past requests lookup also searches (0: none); kept between processes with
    # remember (drafters/suffixstore.py)
    suffix_tokens: int = SUFFIX_TOKENS


# keyword conveniences spelled otherwise than fields
LOAD_KEYWORDS = {"device": "devices", "parallel": "n_seq"}
DRAFT_LOAD_KEYWORDS = {"draft_n_gpu_layers": "n_gpu_layers", "draft_device": "devices"}


def setting_names(cls) -> set[str]:
    """The fields of a settings class but its selector (DrafterConfig's `drafter`,
    RuleConfig's `rule`): what keyword conveniences may name."""
    return {f.name for f in fields(cls)} - {"drafter", "rule"}


def engine_settings(*, has_draft: bool | None = None,
                    drafter: DrafterConfig | str | None = None,
                    rule: RuleConfig | str | None = None, load: LoadOptions | None = None,
                    draft_load: LoadOptions | None = None, rpc: str | tuple | list | None = None,
                    chat_template: str | None = None, remember: bool = False,
                    suffix_tokens: int = SUFFIX_TOKENS, **keywords) -> EngineSettings:
    """The one place where Engine.load's keyword conveniences become typed settings: each
    keyword names a field of DrafterConfig (k, p_min, max_ngram, min_ngram), RuleConfig
    (theta, window, ..., budget) or LoadOptions (n_ctx, n_threads, n_gpu_layers, device,
    ..., no_repack, verbose), or the draft's LoadOptions (draft_n_gpu_layers, draft_device);
    they apply on top of the typed settings given. `drafter` defaults to DEFAULT_DRAFTER
    ("auto", with a draft model or without: `has_draft` no longer matters and is accepted
    for earlier callers). ParameterError names an unknown keyword or an invalid value."""
    check(isinstance(suffix_tokens, int) and not isinstance(suffix_tokens, bool)
          and suffix_tokens >= 0, "suffix_tokens", f"{suffix_tokens!r} (an integer >= 0)")
    by_name = {"drafter": (setting_names(DrafterConfig), {}),
               "rule": (setting_names(RuleConfig), {}),
               "load": (setting_names(LoadOptions) | set(LOAD_KEYWORDS), {}),
               "draft": (set(DRAFT_LOAD_KEYWORDS), {})}
    for name, value in keywords.items():
        group = next((g for g, (names, _) in by_name.items() if name in names), None)
        if group is None:
            raise ParameterError(f"unknown parameter: {name}", param=name)
        by_name[group][1][name] = value
    dcfg = drafter if isinstance(drafter, DrafterConfig) else DrafterConfig(
        drafter or DEFAULT_DRAFTER)
    dcfg = dcfg.with_changes(**by_name["drafter"][1])
    rcfg = rule if isinstance(rule, RuleConfig) else RuleConfig(rule or "strict")
    rcfg = rcfg.with_changes(**by_name["rule"][1])
    changes = {LOAD_KEYWORDS.get(k, k): v for k, v in by_name["load"][1].items()}
    if "tensor_split" in changes:  # any sequence of fractions; empty = none
        changes["tensor_split"] = tuple(changes["tensor_split"] or ()) or None
    opts = (load or LoadOptions()).with_changes(**changes)
    opts = opts.with_changes(n_batch=max(opts.n_batch, dcfg.k_value + 1))  # a block per pass
    draft_changes = {DRAFT_LOAD_KEYWORDS[k]: v for k, v in by_name["draft"][1].items()
                     if v not in (None, "")}  # unset: as the target
    dopts = (draft_load or opts).with_changes(**draft_changes)
    dopts = dopts.with_changes(n_seq=opts.n_seq)  # (a draft sequence per target sequence)
    endpoints = tuple(e.strip() for e in (rpc.split(",") if isinstance(rpc, str) else rpc or ())
                      if e.strip())
    return EngineSettings(dcfg, rcfg, opts, dopts, endpoints,
                          draft_device_given=draft_load is not None or "devices" in draft_changes,
                          chat_template=chat_template, remember=remember,
                          suffix_tokens=suffix_tokens)


def changed_settings(drafter_config: DrafterConfig, rule_config: RuleConfig,
                     drafter: DrafterConfig | str | None = None,
                     rule: RuleConfig | str | None = None,
                     **changes) -> tuple[DrafterConfig, RuleConfig]:
    """Engine.configure's rule for new settings: typed settings replace the current ones; a
    name ("lookup", "fly") or keyword changes apply to them. Unnamed settings keep their
    values, a drafter named without k gets its own default K, drafter keywords given as None
    are ignored, and rule keywords apply as given (window=None: FLy's default window)."""
    drafter_changes = {name: changes.pop(name) for name in setting_names(DrafterConfig)
                       if name in changes}
    if isinstance(drafter, DrafterConfig):
        drafter_config = drafter
    elif drafter is not None:
        drafter_config = drafter_config.with_changes(drafter=drafter, k=None)
    drafter_config = drafter_config.with_changes(**{
        name: value for name, value in drafter_changes.items() if value is not None})
    if isinstance(rule, RuleConfig):
        rule_config = rule
    elif rule:  # ("" keeps the rule: chat's /mode without a name shows it)
        rule_config = rule_config.with_changes(rule=rule)
    return drafter_config, rule_config.with_changes(**changes)
