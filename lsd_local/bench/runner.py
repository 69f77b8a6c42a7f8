"""Run decoding configurations on prompt sets, interleaved, one measurement per run."""

from __future__ import annotations

import os
import resource
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

from ..config import DRAFTERS, N_CTX, RULES, DrafterConfig, RuleConfig
from ..drafters.suffixstore import SuffixIndex
from ..engine import Engine
from ..errors import LsdError, ParameterError
from ..kernels.warmup import load_kernels_now
from .external import run_command
from .prompts import PromptItem

LSD_DRAFTERS = tuple(d for d in DRAFTERS if d != "none")
DRAFT_MODEL_DRAFTERS = ("model", "multilevel")
INT_PARAMS = {"window", "entropy_top_k", "max_exceptions", "max_ngram", "min_ngram"}
FLOAT_PARAMS = {"theta", "gate", "budget", "p_min"}
BOOL_PARAMS = {"forced", "text_lookup", "suffix"}  # 0 or 1 ("suffix": an index or none)
PEER_PRED_TOKENS = 10  # llama-cpp-python's documented example value
BENCH_SUFFIX_TOKENS = 1 << 18  # each configuration's suffix index (a sequence fits whole)


@dataclass(frozen=True)
class BenchConfig:
    """One decoding configuration: plain, lsd rule:drafter[:k][:key=value], peer, external."""

    name: str
    kind: str  # "plain", "lsd", "peer" (llama-cpp-python prompt lookup) or "external"
    rule: str = "strict"
    drafter: str = "none"
    k: int | str | None = None  # an int, "auto" or None (the drafter's default)
    params: tuple[tuple[str, float | int], ...] = ()
    command: str = ""  # external: a command template, see run_external
    grammar: str | None = None  # plain/lsd: a grammar name or .gbnf path (`grammar=NAME`)

    @property
    def lossless(self) -> bool:
        """Greedy output must equal plain decoding (up to near-tie batch numerics)."""
        return self.kind == "plain" or (self.kind == "lsd" and self.rule == "strict")

    @property
    def uses_draft_model(self) -> bool:
        return self.drafter in DRAFT_MODEL_DRAFTERS


def parse_config(text: str) -> BenchConfig:
    """"plain", "peer[:N]", or "rule:drafter[:k][:key=value...]" e.g. "fly:lookup:16:theta=0.6";
    plain and rule configurations take ":grammar=NAME" (a shipped grammar or a .gbnf path)."""
    parts = text.strip().split(":")
    grammar = None
    for part in [p for p in parts if p.startswith("grammar=")]:
        grammar = part.partition("=")[2]
        parts.remove(part)
        if not grammar:
            raise ParameterError(f"invalid config: {text!r}: grammar= needs a name")
    if parts == ["plain"]:
        return BenchConfig(text.strip(), "plain", grammar=grammar)
    if grammar is not None and parts[0] == "peer":
        raise ParameterError(f"invalid config: {text!r}: the peer takes no grammar")
    if parts[0] == "peer":
        n = _int(parts[1], text) if len(parts) > 1 else PEER_PRED_TOKENS
        return BenchConfig(text, "peer", k=n)
    if len(parts) < 2 or parts[0] not in RULES or parts[1] not in LSD_DRAFTERS:
        raise ParameterError(f"invalid config: {text!r} (plain, peer[:N] or "
                             f"rule:drafter[:k][:key=value], rule in {'/'.join(RULES)}, "
                             f"drafter in {'/'.join(LSD_DRAFTERS)})")
    rest = parts[2:]
    k = None
    if rest and "=" not in rest[0]:
        k = "auto" if rest[0] == "auto" else _int(rest[0], text)
        rest = rest[1:]
    params = []
    for item in rest:
        key, _, value = item.partition("=")
        if key not in INT_PARAMS | FLOAT_PARAMS | BOOL_PARAMS:
            raise ParameterError(f"invalid config: {text!r}: unknown setting {key!r}")
        params.append((key, _int(value, text) if key in INT_PARAMS else
                       _bool(value, text) if key in BOOL_PARAMS else _float(value, text)))
    return BenchConfig(text, "lsd", parts[0], parts[1], k, tuple(params), grammar=grammar)


def parse_external(text: str) -> BenchConfig:
    """"NAME=COMMAND" with placeholders {prompt_file} {max_tokens} {threads} {target} {draft}
    {ctx}."""
    name, sep, command = text.partition("=")
    if not sep or not name.strip() or not command.strip():
        raise ParameterError(f"invalid external: {text!r} (expected NAME=COMMAND)")
    return BenchConfig(name.strip(), "external", command=command.strip())


def _bool(value: str, text: str) -> bool:
    if value not in ("0", "1"):
        raise ParameterError(f"invalid config: {text!r}: {value!r} is not 0 or 1")
    return value == "1"


def _int(value: str, text: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ParameterError(f"invalid config: {text!r}: {value!r} is not an integer") from None


def _float(value: str, text: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ParameterError(f"invalid config: {text!r}: {value!r} is not a number") from None


@dataclass
class BenchModels:
    """The models every configuration shares, loaded on first use."""

    target: Path
    draft: Path | None = None
    n_threads: int | None = None
    n_ctx: int = N_CTX
    chat_template: str | None = None
    rpc: str | None = None  # llama.cpp RPC servers the target spreads over (--rpc)
    cold: bool = False  # each run a separate `lsd run` process (--cold, bench/cold.py)
    engines: dict[str, object] = field(default_factory=dict)
    said: set[str] = field(default_factory=set)  # notices printed (once each)
    # (config, repeat, sequence) -> suffix index; sequence None: one per config, emptied each run
    indexes: dict[tuple, SuffixIndex] = field(default_factory=dict)

    def engine(self, with_draft: bool) -> Engine:
        key = "draft" if with_draft else "plain"
        if key not in self.engines:
            if with_draft and self.draft is None:
                raise LsdError("this configuration needs a draft model (--draft)")
            with warnings.catch_warnings():  # the notices are printed once, below
                warnings.simplefilter("ignore")
                self.engines[key] = Engine.load(
                    self.target, self.draft if with_draft else None,
                    drafter="model" if with_draft else "none", k=64, n_ctx=self.n_ctx,
                    n_threads=self.n_threads, chat_template=self.chat_template, rpc=self.rpc,
                    suffix_tokens=0)  # (each configuration gets its own: suffix_index)
            for notice in [n for n in self.engines[key].notices if n not in self.said]:
                self.said.add(notice)
                print(notice, file=sys.stderr)
            load_kernels_now()  # no timed request runs on the numpy fallbacks
        return self.engines[key]

    def suffix_index(self, config: BenchConfig, item: PromptItem, rep: int) -> SuffixIndex:
        """The suffix index a run searches: its sequence's (what this configuration answered
        to the sequence's earlier items in this repeat), else an empty one."""
        key = (config.name, rep if item.sequence is not None else 0, item.sequence)
        index = self.indexes.get(key)
        if index is None:
            index = self.indexes[key] = SuffixIndex(BENCH_SUFFIX_TOKENS)
        elif item.sequence is None:
            index.clear()
        return index

    def drop_sequence(self, sequence: str) -> None:
        """Free the suffix indexes of a sequence whose last item has run."""
        for key in [key for key in self.indexes if key[2] == sequence]:
            del self.indexes[key]

    def peer(self, num_pred_tokens: int):
        from .peer import PeerLlama

        key = f"peer:{num_pred_tokens}"
        if key not in self.engines:
            self.engines[key] = PeerLlama(self.target, self.n_ctx, self.n_threads,
                                          num_pred_tokens)
        return self.engines[key]

    def close(self) -> None:
        for engine in self.engines.values():
            engine.close()
        self.engines.clear()


def default_settings() -> dict:
    """Every drafter and rule setting at its default, so one configuration's explicit
    settings never leak into the next (Engine.configure keeps unnamed settings)."""
    rule = {f.name: f.default for f in fields(RuleConfig) if f.name != "rule"}
    drafter = {name: getattr(DrafterConfig(), name) for name in ("p_min", "max_ngram",
                                                                  "min_ngram", "forced",
                                                                  "text_lookup")}
    return {**rule, **drafter}


def run_one(models: BenchModels, config: BenchConfig, item: PromptItem,
            max_tokens: int, rep: int = 0) -> dict:
    """One generation: speed, counters and the answer."""
    if config.kind == "peer":
        return run_peer(models, config, item, max_tokens)
    if config.kind == "external":
        return run_external(models, config, item, max_tokens)
    if models.cold:
        from .cold import run_cold

        return run_cold(models, config, item, max_tokens)  # (no model in this process)
    engine = models.engine(config.uses_draft_model or (
        config.drafter == "auto" and models.draft is not None))
    # A fresh drafter for every run: what auto learned (costs, acceptance) must not carry over
    # from another configuration or prompt, so that every run starts as `lsd run` does.
    params = dict(config.params)
    engine.suffix_index = models.suffix_index(config, item, rep) if params.pop("suffix", True) \
        else None
    engine.configure(drafter=config.drafter, k=config.k, rule=config.rule, fresh_drafter=True,
                     **{**default_settings(), **params})
    engine.reset()  # every configuration pays the same prefill
    gen = engine.generate(list(item.messages), max_tokens=max_tokens,
                          grammar=config.grammar, json_schema=item.json_schema,
                          tools=list(item.tools) or None, tool_choice=item.tool_choice).run()
    s = gen.stats
    return {"text": gen.text, "tokens": gen.tokens, "n_tokens": s.generated_tokens,
            "tps": s.decode_tokens_per_second, "prefill_s": s.prefill_seconds,
            "tau": s.tau, "acceptance": s.acceptance_rate, "drafted": s.drafted,
            "accepted": s.accepted, "loose": s.accepted_loose, "rounds": s.rounds,
            "draft_s": s.draft_seconds, "verify_s": s.verify_seconds,
            "other_s": s.other_seconds, "constrain_s": s.constrain_seconds,
            "accepted_per_round": list(s.accepted_per_round),
            "draft_sources": dict(s.draft_sources), "draft_lengths": dict(s.draft_lengths),
            "accepted_by_source": dict(s.accepted_by_source),
            "tool_calls": [[c.name, c.arguments] for c in gen.tool_calls],
            "finish_reason": gen.finish_reason}


def run_peer(models: BenchModels, config: BenchConfig, item: PromptItem,
             max_tokens: int) -> dict:
    peer = models.peer(config.k or PEER_PRED_TOKENS)
    text, first_s, decode_s = peer.generate(item.messages, max_tokens)
    tokens = models.engine(False).target.vocab.tokenize(text, add_special=False)
    n = len(tokens)
    return {"text": text, "tokens": tokens, "n_tokens": n, "prefill_s": first_s,
            "tps": (n - 1) / decode_s if decode_s > 0 and n > 1 else 0.0}


def run_external(models: BenchModels, config: BenchConfig, item: PromptItem,
                 max_tokens: int) -> dict:
    """Run the external command on the prompt lsd evaluates (external.run_command): its
    speed and, for llama.cpp's tools, its answer and that answer's tokens."""
    engine = models.engine(False)
    values = {"max_tokens": max_tokens, "n_predict": max(max_tokens - 1, 1),
              "target": models.target, "draft": models.draft or "",
              "threads": models.n_threads or os.cpu_count(), "ctx": models.n_ctx}
    row = run_command(config.name, config.command, engine.prompt_text(list(item.messages)),
                      values, max_tokens)
    if "text" in row:
        row["tokens"] = engine.target.vocab.tokenize(row["text"], add_special=False)
    return row


@dataclass(frozen=True)
class Progress:
    """One finished run, for progress display."""

    done: int
    total: int
    elapsed_s: float
    row: dict

    @property
    def eta_s(self) -> float:
        return self.elapsed_s / self.done * (self.total - self.done) if self.done else 0.0


def run_bench(models: BenchModels, configs: Sequence[BenchConfig],
              items: Sequence[PromptItem], max_tokens: int, repeat: int = 1
              ) -> Iterator[Progress]:
    """Every configuration on every prompt, interleaved per prompt (A B C, A B C, ...) so that
    machine drift hits all alike. Yields one Progress per run; rows hold the measurements."""
    refuse_unconstrained(models, configs, items)
    warm_up(models, configs, items[0])
    models.indexes.clear()  # (the warm-up's answers are no request's past)
    last_of = {item.sequence: at for at, item in enumerate(items)}  # a sequence's last item
    total = len(items) * repeat * len(configs)
    start = time.perf_counter()
    done = 0
    for at, item in enumerate(items):
        budget = item.max_tokens or max_tokens
        for rep in range(repeat):
            for config in configs:
                row = {"set": item.set_name, "id": item.id, "rep": rep,
                       "config": config.name, "max_tokens": budget,
                       **run_one(models, config, item, budget, rep), "rss_mb": peak_rss_mb(),
                       **({} if item.sequence is None else {"sequence": item.sequence})}
                done += 1
                yield Progress(done, total, time.perf_counter() - start, row)
        if item.sequence is not None and at == last_of[item.sequence]:
            models.drop_sequence(item.sequence)  # its indexes are done with: free them


def refuse_unconstrained(models: BenchModels, configs: Sequence[BenchConfig],
                         items: Sequence[PromptItem]) -> None:
    """The peer, external commands and --cold cannot take a prompt's JSON schema or tools:
    they would answer unconstrained, which is no comparison."""
    constrained = next((i for i in items if i.json_schema is not None or i.tools), None)
    if constrained is None:
        return
    who = [c.name for c in configs if c.kind in ("peer", "external")]
    who += ["--cold"] if models.cold else []
    if who:
        raise LsdError(f"{', '.join(who)} cannot take a prompt's json_schema or tools "
                       f"({constrained.set_name}/{constrained.id} has them): leave "
                       f"{'it' if len(who) == 1 else 'them'} out for this prompt set")


def warm_up(models: BenchModels, configs: Sequence[BenchConfig], item: PromptItem) -> None:
    """Load the models, page in their weights and compile the kernels before timing (--cold:
    only the kernels, into numba's cache that every process loads)."""
    if models.cold:
        load_kernels_now()
        return
    for config in configs:
        if config.kind in ("lsd", "plain"):
            run_one(models, config, item, 8)
    if any(c.kind == "peer" for c in configs):
        run_one(models, next(c for c in configs if c.kind == "peer"), item, 8)


def peak_rss_mb() -> float:
    """High-water mark of this process's resident memory (all configurations share it)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
