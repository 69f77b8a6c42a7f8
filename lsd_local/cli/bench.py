"""`lsd bench`: parses options, runs lsd_local.bench, prints tables and progress."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..bench.prompts import BUILTIN_SETS, SPLITS
from ..bench.tune import tune_grid
from ..config import MAX_TOKENS, N_CTX
from ..errors import ParameterError
from .options import complete_model, notify

LLAMA_CPP_COMMANDS = {
    "llama.cpp:plain": "{bin}/llama-completion -m {{target}} -f {{prompt_file}} -n {{max_tokens}}"
                       " -t {{threads}} --temp 0 -c {{ctx}} -no-cnv --no-display-prompt",
    # (llama-speculative-simple decodes until it holds more than -n tokens: {n_predict} is
    # max_tokens - 1, so that every round it runs is one it needs for the tokens asked)
    **{f"llama.cpp:{kind}": "{bin}/llama-speculative-simple -m {{target}} -f {{prompt_file}} "
                            "-n {{n_predict}} -t {{threads}} --temp 0 -c {{ctx}} "
                            f"--spec-type {kind}"
       for kind in ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod",
                    "ngram-cache")},
    "llama.cpp:draft": "{bin}/llama-speculative-simple -m {{target}} -md {{draft}} "
                       "-f {{prompt_file}} -n {{n_predict}} -t {{threads}} --temp 0 -c {{ctx}} "
                       "--spec-type draft-simple --spec-draft-n-max 4",
}


@click.command()
@click.argument("model", required=False, shell_complete=complete_model)
@click.option("--draft", default=None, metavar="MODEL|none",
              help="Draft model for the model/multilevel configurations. Default: the "
                   "registry's draft for MODEL when it is downloaded.")
@click.option("--prompts", default=",".join(BUILTIN_SETS), show_default=True,
              help="Comma-separated prompt sets: built-in names or JSONL files "
                   "(format: bench/README.md).")
@click.option("--split", type=click.Choice(SPLITS), default="test", show_default=True,
              help="Which prompts of each set (--tune always uses dev).")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="First N prompts of each set.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=MAX_TOKENS, show_default=True)
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Runs per prompt and configuration (the speedup spread is over them).")
@click.option("--configs", default=None, metavar="C1,C2,...",
              help="plain, peer[:N] (llama-cpp-python prompt lookup) or "
                   "rule:drafter[:k][:key=value], e.g. fly:lookup:16:theta=0.6. Default: "
                   "plain, each rule with each drafter, peer.")
@click.option("--grammar", default=None, metavar="NAME|PATH",
              help="Constrain plain and rule configurations without their own "
                   "':grammar=NAME' to this grammar (shipped name or .gbnf file).")
@click.option("--external", multiple=True, metavar="NAME=COMMAND", allow_from_autoenv=False,
              help="Also time a command on each prompt; placeholders {prompt_file} "
                   "{max_tokens} {threads} {target} {draft} {ctx}; tok/s is read from its "
                   "output.")
@click.option("--llama-cpp", "llama_cpp_bin", type=click.Path(file_okay=False), default=None,
              help="llama.cpp build/bin folder: adds llama-completion and "
                   "llama-speculative-simple (each n-gram type, draft) as external columns.")
@click.option("--tune", is_flag=True,
              help="Sweep K, FLy theta/W and ASD gate/budget on the dev split; report the "
                   "fastest setting per rule above --quality-floor.")
@click.option("--tune-drafter", type=click.Choice(["lookup", "model", "multilevel"]),
              default="lookup", show_default=True)
@click.option("--quality-floor", type=click.FloatRange(0, 1), default=0.99, show_default=True)
@click.option("--threads", type=click.IntRange(min=1), default=None)
@click.option("--cold", is_flag=True,
              help="Run each prompt of each configuration as a separate `lsd run` process, "
                   "what a script calling lsd once per request sees (with what auto "
                   "remembered from the runs before it).")
@click.option("--rpc", default=None, metavar="HOST:PORT,...",
              help="Spread the target over these llama.cpp RPC servers (docs/devices.md).")
@click.option("--ctx", type=click.IntRange(min=64), default=N_CTX, show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default="lsd-bench.json",
              envvar="LSD_BENCH_JSON",
              show_default=True, help="Every per-prompt measurement and the summaries.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="PNG plot (needs matplotlib). Default: next to the JSON when matplotlib "
                   "is installed.")
@click.option("--no-cost", is_flag=True, help="Skip the cost report (target batch timings).")
@click.option("--profile", is_flag=True,
              help="Only measure the ceiling on this machine: the target's time to score n "
                   "tokens, the best speedup perfect drafts could give and at which K, and "
                   "the file's weight types that have no batched kernel here.")
@click.option("--concurrency", type=click.IntRange(min=2), default=None, metavar="N",
              help="Only the serving workload: N clients at once (mixed long and short chat "
                   "requests) against lsd serve --parallel N and --parallel 1, and with "
                   "--llama-cpp llama-server -np N plain and with each speculative type.")
@click.option("--check-timeout", type=click.FloatRange(min=0.1), default=10.0,
              show_default=True, help="Seconds each HumanEval answer may run its tests.")
def bench(model: str | None, **opts) -> None:
    """Measure speed and quality of decoding configurations side by side on MODEL.

    Every configuration runs on the same prompts, interleaved per prompt; the table reports
    decode tok/s, speedup over plain decoding, tau, acceptance, loose acceptances per 100
    tokens, time shares, identical outputs and HumanEval pass@1 with its retention.
    """
    from ..backend.cpu_probe import repack_off
    from ..bench.runner import BenchModels, parse_external
    from ..bench.suite import BenchOptions, default_configs, parse_configs

    target, draft, template = resolve_bench_models(model, opts["draft"])
    if opts["concurrency"]:
        return run_concurrency_workload(target, draft, opts)
    names = (opts["configs"].split(",") if opts["configs"] else default_configs(bool(draft)))
    if opts["tune"]:
        names = ["plain"] + tune_grid(opts["tune_drafter"], tune_ks(opts["tune_drafter"]))
    configs = with_grammar(parse_configs(names, draft is not None), opts["grammar"])
    externals = list(opts["external"]) + llama_cpp_externals(
        opts["llama_cpp_bin"], draft, bool(opts["llama_cpp_bin"]) and repack_off())
    if externals and opts["grammar"]:
        raise ParameterError("invalid external: external commands cannot take --grammar")
    configs += [parse_external(text) for text in externals]
    options = BenchOptions(sets=opts["prompts"].split(","),
                           split="dev" if opts["tune"] else opts["split"], limit=opts["limit"],
                           max_tokens=opts["max_tokens"], repeat=opts["repeat"],
                           configs=configs, cost=not opts["no_cost"] and not opts["tune"],
                           check_timeout=opts["check_timeout"],
                           meta={"command": " ".join(sys.argv)})
    models = BenchModels(target, draft, opts["threads"], opts["ctx"], template, opts["rpc"],
                         cold=opts["cold"])
    try:
        if opts["profile"]:
            return run_profile(models, options)
        result = run_and_print(models, options)
    finally:
        models.close()
    finish(result, opts)


def run_concurrency_workload(target: Path, draft: Path | None, opts: dict) -> None:
    """lsd bench --concurrency N: servers in subprocesses, N clients at once."""
    from ..backend.cpu_probe import repack_off
    from ..bench.concurrency import ConcurrencyPlan, format_columns, run_concurrency, workload
    from ..bench.suite import load_items

    items = load_items(opts["prompts"].split(","), opts["split"], opts["limit"])
    plan = ConcurrencyPlan(target, draft, opts["concurrency"],
                           tuple(workload(items, opts["concurrency"], opts["max_tokens"])),
                           opts["ctx"], opts["threads"], opts["repeat"],
                           Path(opts["llama_cpp_bin"]) if opts["llama_cpp_bin"] else None,
                           no_repack=bool(opts["llama_cpp_bin"]) and repack_off())
    columns, behind = run_concurrency(plan, notify)
    click.echo(format_columns(columns, behind))


def run_profile(models, options) -> None:
    """lsd bench --profile: measured after the first prompt of the sets (~300 tokens)."""
    from ..bench.profile import PROFILE_SIZES, format_profile, profile
    from ..bench.suite import load_items

    engine = models.engine(models.draft is not None)
    item = load_items(options.sets, options.split, 1)[0]
    room = engine.target.n_ctx - max(PROFILE_SIZES) - 1  # (--ctx may be small)
    context = engine.prompt_tokens(list(item.messages))[:max(1, min(300, room))]
    notify(f"profiling {models.target.name} after {len(context)} tokens of context "
           "(it says how long it will take once its first pass is timed)")
    click.echo(format_profile(profile(engine.target, engine.draft_model, context,
                                      notify=notify)))


def with_grammar(configs: list, grammar: str | None) -> list:
    """Give `grammar` to every plain/rule configuration that names none (the peer and external
    commands cannot take one: refuse rather than compare constrained with unconstrained)."""
    from dataclasses import replace

    from ..grammars import grammar_text

    if grammar is None:
        return configs
    grammar_text(grammar)  # an unknown name or unreadable file fails before any model loads
    if any(c.kind == "peer" for c in configs):
        raise ParameterError("invalid configs: the peer cannot take --grammar; leave it out")
    return [replace(c, grammar=c.grammar or grammar) if c.kind in ("plain", "lsd") else c
            for c in configs]


def tune_ks(drafter: str) -> list[int]:
    return [16, 32, 48] if drafter == "lookup" else [2, 4, 6]


def resolve_bench_models(model: str | None, draft: str | None):
    """(target path, draft path or None, chat template override) from names or paths."""
    from ..models.registry import load_registry
    from ..models.resolve import default_model, resolve_one

    registry = load_registry()
    if model is None:
        model, _ = default_model(registry, notify)
    target, spec = resolve_one(model, registry, notify)
    draft_path = None
    if draft not in (None, "none"):
        draft_path = resolve_one(draft, registry, notify)[0]
    elif draft is None and spec is not None and spec.draft:
        from ..models.hub import cached_file

        cached = cached_file(registry[spec.draft]) if spec.draft in registry else None
        if cached is None:
            notify(f"draft {spec.draft} is not downloaded (`lsd pull {spec.draft}`); "
                    "benchmarking without the draft-model configurations")
        draft_path = cached
    return target, draft_path, spec.chat_template if spec else None


def llama_cpp_externals(folder: str | None, draft: Path | None,
                        no_repack: bool = False) -> list[str]:
    """llama.cpp's tools as external columns; with `no_repack` they load as lsd does where
    the CPU traps AMX (their -nr). Each reads the prompt file with --no-escape: by default
    llama.cpp turns the prompt's \\n, \\t, \\' ... into the characters they name
    (common/arg.cpp), so a prompt quoting code such as print('%g\\n') reached the tools as
    other bytes than lsd's."""
    if not folder:
        return []
    out = []
    for name, template in LLAMA_CPP_COMMANDS.items():
        if "{draft}" in template and draft is None:
            continue
        extra = " --no-escape" + (" -nr" if no_repack else "")
        out.append(f"{name}={template.format(bin=Path(folder).resolve())}{extra}")
    return out


def run_and_print(models, options):
    from ..bench.report import format_table, summarize
    from ..bench.suite import run_suite

    state = {"set": None, "rows": []}

    def show(progress) -> None:
        row = progress.row
        if state["set"] not in (None, row["set"]):
            notify("\n" + format_table(summarize(state["rows"])))
            state["rows"] = []
        state["set"] = row["set"]
        state["rows"].append(row)
        eta = int(progress.eta_s)
        filled = 20 * progress.done // progress.total
        _status(f"[{'#' * filled}{'.' * (20 - filled)}] {progress.done}/{progress.total} "
                f"{row['set']} {row['id']} {row['config']}: {row['tps']:.1f} tok/s  "
                f"ETA {eta // 60}m{eta % 60:02d}s")

    if any(name == "humaneval" or name.startswith("humaneval") for name in options.sets):
        from ..bench.humaneval import sandbox_isolation

        isolation = sandbox_isolation()
        notify("HumanEval answers are run in " + (
            f"{isolation}, with resource limits and an audit hook"
            if not isolation.startswith("none") else
            "a child process with resource limits and an audit hook only: this machine gives "
            f"no OS isolation ({isolation[6:]}), and an audit hook is not a sandbox; "
            "LSD_SANDBOX_REQUIRE=1 refuses to run them then"))
    result = run_suite(models, options, show)
    _status("")
    return result


def finish(result, opts) -> None:
    from ..bench.cost import format_costs
    from ..bench.report import (
        against_external,
        choices,
        differing_answers,
        format_table,
        sequence_requests,
        suppliers,
    )
    from ..bench.suite import write_outputs
    from ..bench.tune import candidate_scores, choose, format_tuning

    click.echo(format_table(result.summaries))
    for line in differing_answers(result.rows):
        click.echo(f"warning: {line}")
    versus = against_external(result.rows)
    if versus:
        click.echo("speed over the fastest external drafting command on each prompt:\n"
                   + "\n".join(versus) + "\n")
    auto = choices(result.rows)
    if auto:
        click.echo("what auto chose:\n" + "\n".join(auto) + "\n")
    supplied = suppliers(result.summaries)
    if supplied:
        click.echo("accepted tokens by drafter:\n" + "\n".join(supplied) + "\n")
    in_order = sequence_requests(result.rows)
    if in_order:
        click.echo("requests of a sequence, in order (speedup over plain; share of the accepted "
                   "tokens drafted from earlier answers):\n" + "\n".join(in_order) + "\n")
    if result.costs is not None:
        click.echo("cost on this machine:\n" + format_costs(result.costs, result.cost_rows))
    extra_tune = None
    if opts["tune"]:
        scores = candidate_scores(result.summaries)
        best = choose(scores, opts["quality_floor"])
        click.echo("\ntuning on the dev split:\n" + format_tuning(scores, best,
                                                                 opts["quality_floor"]))
        extra_tune = {"scores": scores, "best": best, "floor": opts["quality_floor"]}
        result.meta["tune"] = extra_tune
    json_path = Path(opts["json_path"])
    plot_path = Path(opts["plot_path"]) if opts["plot_path"] else default_plot(json_path)
    write_outputs(result, json_path, plot_path)
    click.echo(f"\nwrote {json_path}" + (f" and {plot_path}" if plot_path else ""))


def default_plot(json_path: Path) -> Path | None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        notify('no plot: matplotlib is not installed (pip install "lsd-local[bench]")')
        return None
    return json_path.with_suffix(".png")


def _status(message: str) -> None:
    """A progress line: rewritten in place on a terminal, one line per run otherwise."""
    if sys.stderr.isatty():
        click.echo("\r\033[K" + message, err=True, nl=False)
    elif message:
        click.echo(message, err=True)
