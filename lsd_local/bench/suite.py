"""A whole `lsd bench` run: prompts, interleaved runs, scoring, summaries, cost, outputs."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..config import MAX_TOKENS
from ..errors import LsdError
from . import cost as cost_mod
from .prompts import BUILTIN_SETS, PromptItem, load_set
from .report import score_answers, summarize
from .runner import BenchConfig, BenchModels, Progress, parse_config, run_bench


def default_configs(with_draft: bool) -> list[str]:
    """Target only, every rule with every drafter, and llama-cpp-python's prompt lookup."""
    drafters = ("lookup", "model", "multilevel") if with_draft else ("lookup",)
    return (["plain"] + [f"{rule}:{d}" for rule in ("strict", "fly", "asd") for d in drafters]
            + ["peer"])


@dataclass
class BenchOptions:
    """What to run and what to write."""

    sets: Sequence[str] = BUILTIN_SETS
    split: str = "test"
    limit: int | None = 20
    max_tokens: int = MAX_TOKENS
    repeat: int = 1
    configs: Sequence[BenchConfig] = ()
    cost: bool = True
    check_timeout: float = 10.0
    meta: dict = field(default_factory=dict)


@dataclass
class BenchResult:
    """Per-run rows, per (set, config) summaries and the cost report."""

    rows: list[dict]
    summaries: list[dict]
    costs: dict | None
    cost_rows: list[dict]
    meta: dict

    def extra(self) -> dict:
        return {"cost": _json_costs(self.costs), "cost_report": self.cost_rows}


def load_items(sets: Sequence[str], split: str, limit: int | None) -> list[PromptItem]:
    items: list[PromptItem] = []
    for name in sets:
        items += load_set(name, split, limit)
    return items


def parse_configs(names: Sequence[str], with_draft: bool) -> list[BenchConfig]:
    """Parse configuration names; "plain" comes first (it is every speedup's baseline)."""
    configs = [parse_config(name) for name in names]
    if not with_draft and any(c.uses_draft_model for c in configs):
        raise LsdError("configurations with the model or multilevel drafter need a draft "
                       "model (--draft)")
    if len({c.name for c in configs}) != len(configs):
        raise LsdError("a configuration is listed twice")
    plain = [c for c in configs if c.name == "plain"] or [parse_config("plain")]
    return plain + [c for c in configs if c.name != "plain"]


def run_suite(models: BenchModels, options: BenchOptions,
              on_progress: Callable[[Progress], None] = lambda p: None) -> BenchResult:
    """Run every configuration on every prompt of every set, score, summarize, cost."""
    from .humaneval import check_answer

    items = load_items(options.sets, options.split, options.limit)
    rows = []
    started = time.time()
    for progress in run_bench(models, options.configs, items, options.max_tokens,
                              options.repeat):
        rows.append(progress.row)
        on_progress(progress)
    # Checking runs after all timing, so its subprocesses never disturb a measurement.
    score_answers(rows, items, lambda task, text: check_answer(task, text,
                                                               options.check_timeout))
    summaries = summarize(rows)
    costs, cost_rows = None, []
    if options.cost:
        costs = measure(models, items[0])
        cost_rows = cost_mod.cost_report(costs, summaries, rows)
    meta = {**environment(models, options), "seconds": time.time() - started, **options.meta}
    return BenchResult(rows, summaries, costs, cost_rows, meta)


def measure(models: BenchModels, item: PromptItem) -> dict:
    engine = models.engine(models.draft is not None)
    context = engine.prompt_tokens(list(item.messages))[:256]
    return cost_mod.measure_costs(engine.target, engine.draft_model, context)


def environment(models: BenchModels, options: BenchOptions) -> dict:
    import os

    return {"target": str(models.target), "draft": str(models.draft) if models.draft else None,
            "threads": models.n_threads, "n_ctx": models.n_ctx, "sets": list(options.sets),
            "split": options.split, "limit": options.limit, "max_tokens": options.max_tokens,
            "repeat": options.repeat, "configs": [c.name for c in options.configs],
            "machine": platform.machine(), "cpus": os.cpu_count(),
            "python": platform.python_version()}


def _json_costs(costs: dict | None) -> dict | None:
    if costs is None:
        return None
    return {"target_s": {str(n): s for n, s in costs["target_s"].items()},
            "draft_token_s": costs["draft_token_s"]}


def write_outputs(result: BenchResult, json_path: Path | None, plot_path: Path | None) -> None:
    from .report import write_json

    if json_path is not None:
        write_json(json_path, result.meta, result.rows, result.summaries, result.extra())
    if plot_path is not None:
        from .plot import write_plot
        write_plot(plot_path, result.summaries, result.rows)
