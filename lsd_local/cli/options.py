"""Options shared by `lsd run` and `lsd chat`, and the helpers that turn them
into an Engine."""

from __future__ import annotations

import os
import sys
import warnings

import click

from ..config import (
    ASD_BUDGET,
    ASD_GATE,
    ASD_MAX_EXCEPTIONS,
    CLI_MAX_TOKENS,
    DRAFTERS,
    ENTROPY_MODES,
    FLY_ENTROPY,
    FLY_ENTROPY_TOP_K,
    FLY_THETA,
    FLY_WINDOW,
    FREQUENCY_PENALTY,
    MIN_P,
    N_CTX,
    P_MIN,
    PRESENCE_PENALTY,
    REPEAT_LAST_N,
    REPEAT_PENALTY,
    RULES,
    SUFFIX_TOKENS,
    TEMPERATURE,
    TOP_K,
    TOP_P,
)
from ..errors import ParameterError


class KType(click.ParamType):
    """--k: 'auto' or an integer >= 1."""

    name = "auto|N"

    def convert(self, value, param, ctx):
        if value == "auto" or isinstance(value, int):
            return value
        try:
            k = int(value)
        except ValueError:
            self.fail(f"{value!r} is neither 'auto' nor an integer", param, ctx)
        if k < 1:
            self.fail(f"{k} is not >= 1", param, ctx)
        return k


class LayersType(click.ParamType):
    """--n-gpu-layers: 'auto', 'all' or an integer (-1 = all)."""

    name = "auto|all|N"

    def convert(self, value, param, ctx):
        if value in ("auto", "all") or isinstance(value, int):
            return value
        try:
            return int(value)
        except ValueError:
            self.fail(f"{value!r} is neither 'auto', 'all' nor an integer", param, ctx)


class AliasOption(click.Option):
    """An option that also takes llama.cpp's spellings (-ngl, -c, -t, ...) so that a
    llama.cpp command line works as is; help shows lsd's spelling only."""

    def __init__(self, *args, aliases: tuple[str, ...] = (), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.aliases = aliases
        self.opts.extend(aliases)

    def get_help_record(self, ctx):
        shown = self.opts
        self.opts = [name for name in shown if name not in self.aliases]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = shown


def llama_option(*names: str, aliases: tuple[str, ...], **kwargs):
    """click.option that also accepts llama.cpp's `aliases`."""
    return click.option(*names, cls=AliasOption, aliases=aliases, **kwargs)


ENGINE_OPTIONS = [
    llama_option("--draft", aliases=("-md", "--model-draft"), default=None,
                 metavar="MODEL|none",
                 help="Draft model (registry name or .gguf) with the target's vocabulary. It "
                      "proposes tokens that the target checks in one batched pass."),
    click.option("--drafter", type=click.Choice(DRAFTERS), default=None,
                 help="Who proposes tokens: auto (default: each round prompt lookup, the "
                      "draft model or none, whichever the measured costs and acceptance make "
                      "fastest), model, lookup (copies n-grams from the context), multilevel "
                      "(both), none (plain decoding)."),
    click.option("--rule", type=click.Choice(RULES), default=None,
                 help="How drafts are checked: strict (default) keeps exact matches only, "
                      "lossless; fly and asd also keep mismatches the target signals are "
                      "harmless."),
    click.option("-k", "--k", "k", type=KType(), default="auto", show_default=True,
                 help="Tokens drafted per round: auto chooses each round from measured "
                      "verification cost and acceptance (0 = a plain step when drafts do not "
                      "pay); a number fixes it."),
    click.option("--theta", type=click.FloatRange(min=0), default=FLY_THETA, show_default=True,
                 help="FLy: keep a mismatch only where the target's top-k entropy is at least "
                      "theta, i.e. the target itself was unsure there."),
    click.option("--window", type=click.IntRange(min=1), default=None,
                 help="FLy: ... and only if the next W draft tokens all match (the target "
                      f"went on with the draft). Default min({FLY_WINDOW}, K-1)."),
    click.option("--entropy-top-k", type=click.IntRange(min=1), default=FLY_ENTROPY_TOP_K,
                 show_default=True,
                 help="FLy: the entropy sums over this many largest probabilities."),
    click.option("--entropy", type=click.Choice(ENTROPY_MODES), default=FLY_ENTROPY,
                 show_default=True,
                 help="FLy: topk sums -p log p over the top-k probabilities (FLy's code, "
                      "vLLM); normalized is the paper's full entropy divided by log V."),
    click.option("--gate", type=click.FloatRange(min=0), default=ASD_GATE, show_default=True,
                 help="ASD: a mismatch's logit regret divided by the tokens left in the block "
                      "must be at most this."),
    click.option("--max-exceptions", type=click.IntRange(min=0), default=ASD_MAX_EXCEPTIONS,
                 show_default=True, help="ASD: most kept mismatches per round."),
    click.option("--budget", type=click.FloatRange(min=0), default=ASD_BUDGET, show_default=True,
                 help="ASD: total logit regret one answer may spend on kept mismatches "
                      "(0 = strict)."),
    llama_option("--p-min", aliases=("--draft-p-min",), type=click.FloatRange(0, 1),
                 default=P_MIN, show_default=True,
                 help="Draft model: stop drafting when its top-1 probability (among its 10 "
                      "likeliest tokens, as llama.cpp) falls below."),
    llama_option("--ctx", aliases=("-c", "--ctx-size"), type=click.IntRange(min=8), default=None,
                 help="Context size in tokens (prompt + answers). Default: the registry's, "
                      f"else {N_CTX}."),
    llama_option("--threads", aliases=("-t",), type=click.IntRange(min=1), default=None,
                 help="CPU threads. Default: physical cores."),
    llama_option("--n-gpu-layers", aliases=("-ngl", "--gpu-layers"), type=LayersType(),
                 default="auto", show_default=True,
                 help="Target layers on the GPUs: auto puts all of them there when a GPU (or "
                      "an RPC server) is available, else none; or a number (-1 = all)."),
    llama_option("--draft-n-gpu-layers", aliases=("-ngld", "--gpu-layers-draft",
                                                  "--n-gpu-layers-draft"),
                 type=LayersType(), default=None,
                 help="Draft layers on the GPUs (default: as --n-gpu-layers)."),
    llama_option("--device", aliases=("-dev",), default=None, metavar="NAMES",
                 help="Devices the target may use, comma-separated as `lsd devices` names "
                      "them (CUDA0, Metal, RPC0, ...); none = CPU only. Default: "
                      "all."),
    llama_option("--draft-device", aliases=("-devd", "--device-draft"), default=None,
                 metavar="NAMES",
                 help="Devices the draft may use (default: as --device; with --rpc, the "
                      "local ones)."),
    click.option("--rpc", default=None, metavar="HOST:PORT,...",
                 help="llama.cpp RPC servers (rpc-server) to spread the target over; each is "
                      "checked before loading. Needs llama-cpp-python built with "
                      "-DGGML_RPC=on."),
    llama_option("--split-mode", aliases=("-sm",), type=click.Choice(["none", "layer", "row"]),
                 default="layer", show_default=True,
                 help="How to split a model across several GPUs."),
    llama_option("--tensor-split", aliases=("-ts",), default=None, metavar="F,F,...",
                 help="Fraction of the model per GPU, e.g. 3,1."),
    llama_option("--main-gpu", aliases=("-mg",), type=int, default=0, show_default=True,
                 help="GPU for the whole model (split mode none) or for small tensors."),
    llama_option("--no-repack", aliases=("-nr",), is_flag=True,
                 help="Load without llama.cpp's extra buffer types (repacked weights, AMX), "
                      "as llama.cpp's option of that name. Default: they are used, except "
                      "where the CPU traps AMX (found by a one-time probe); LSD_NO_REPACK=1 "
                      "also turns them off."),
    click.option("--fresh", is_flag=True,
                 help="Start auto's cost and acceptance estimates and the suffix index "
                      "empty and save nothing (default: continue from earlier runs of these "
                      "models on this machine; also LSD_NO_STATE=1)."),
    click.option("--suffix-tokens", type=click.IntRange(min=0), default=SUFFIX_TOKENS,
                 show_default=True,
                 help="Tokens of past requests (answers and their prompts' ends) that "
                      "lookup also drafts from, kept under ~/.cache/lsd/suffix between runs "
                      "(user text: mode 0600; `lsd rm --cache` deletes it). 0: none."),
    click.option("--verbose", is_flag=True, help="Show llama.cpp's log."),
]

MAX_TOKENS_OPTION = llama_option("--max-tokens", aliases=("-n", "--n-predict"),
                                 type=click.IntRange(min=0), default=CLI_MAX_TOKENS,
                                 show_default=True, help="Most tokens per answer.")
SAMPLER_OPTIONS = [
    llama_option("--temperature", aliases=("--temp",), type=click.FloatRange(min=0),
                 default=TEMPERATURE,
                 show_default=True,
                 help="0 = greedy. Above 0, speculative sampling keeps the target's "
                      "distribution exactly (strict) or nearly (fly)."),
    click.option("--top-k", type=click.IntRange(min=0), default=TOP_K, show_default=True,
                 help="Sampling: keep the k most likely tokens (0 = all)."),
    click.option("--top-p", type=click.FloatRange(min=0, max=1, min_open=True), default=TOP_P,
                 show_default=True, help="Sampling: keep the smallest set with this mass."),
    click.option("--min-p", type=click.FloatRange(0, 1), default=MIN_P, show_default=True,
                 help="Sampling: drop tokens below min-p times the top probability."),
    llama_option("--seed", aliases=("-s",), type=int, default=None,
                 help="Sampling seed (reproducible)."),
    click.option("--stop", multiple=True, metavar="TEXT", allow_from_autoenv=False,
                 help="End the answer where TEXT appears (not shown); repeatable."),
    click.option("--repeat-penalty", type=click.FloatRange(min=0, min_open=True),
                 default=REPEAT_PENALTY, show_default=True,
                 help="Divide the logits of tokens seen in the last --repeat-last-n tokens "
                      "(llama.cpp's; 1 = off)."),
    click.option("--repeat-last-n", type=click.IntRange(min=-1), default=REPEAT_LAST_N,
                 show_default=True,
                 help="Tokens the penalties look back over (0 = off, -1 = all)."),
    click.option("--presence-penalty", type=click.FloatRange(-2, 2), default=PRESENCE_PENALTY,
                 show_default=True, help="Lower seen tokens' logits by this (OpenAI's)."),
    click.option("--frequency-penalty", type=click.FloatRange(-2, 2),
                 default=FREQUENCY_PENALTY, show_default=True,
                 help="Lower seen tokens' logits by this times their count (OpenAI's)."),
    llama_option("--logit-bias", aliases=("-l",), multiple=True, metavar="TOKEN(+|-)BIAS",
                 allow_from_autoenv=False,
                 help="Add BIAS to a token's logit, e.g. 15043+1 or 15043-inf (a ban); "
                      "repeatable. llama.cpp's spelling."),
    click.option("--system", default=None, help="System message for the chat template."),
    click.option("--grammar", default=None, metavar="NAME|PATH",
                 help="Constrain the answer to a GBNF grammar: a shipped one (json, "
                      "json_object, json_string_array, list, arithmetic, python_function) or "
                      "a .gbnf file. No rule ever commits a token it forbids."),
    click.option("--json-schema", type=click.Path(dir_okay=False), default=None,
                 metavar="FILE", help="Constrain the answer to JSON matching this schema."),
]
CHAT_OPTIONS = [
    click.option("--reasoning-format", type=click.Choice(["auto", "none"]), default="auto",
                 show_default=True,
                 help="auto: a <think> block is reasoning, shown apart from the answer (dimmed "
                      "on a terminal, on stderr for `lsd run`); none: it stays in the answer."),
    click.option("--chat-template-kwargs", default=None, metavar="JSON",
                 help='What else the chat template reads, e.g. \'{"enable_thinking": false}\''),
    click.option("--reasoning-budget", type=click.IntRange(min=-1), default=-1,
                 show_default=True, metavar="N",
                 help="At most N tokens inside a <think> block, then lsd closes it and the "
                      "model answers (-1: no limit; 0: answer at once)."),
]
TOOL_OPTIONS = [
    click.option("--tools", "tools_file", type=click.Path(dir_okay=False), default=None,
                 metavar="FILE",
                 help="OpenAI tool specifications (a JSON list) the model may call; a call is "
                      "shown as a call (--json: under tool_calls)."),
    click.option("--tool-choice", default="auto", show_default=True,
                 metavar="auto|none|required|NAME",
                 help="Whether the model may, must or must not call a tool, or which one."),
]
SAMPLING_OPTIONS = [MAX_TOKENS_OPTION] + SAMPLER_OPTIONS + CHAT_OPTIONS


def with_options(options):
    def decorate(func):
        for option in reversed(options):
            func = option(func)
        return func
    return decorate


def check_grammar_source(opts: dict) -> None:
    """Fail on an unknown grammar, an unreadable file or invalid schema JSON before loading any
    model (GBNF syntax needs the vocabulary: the engine checks it before generating)."""
    from ..grammars import grammar_text, load_schema

    if opts["grammar"] is not None and opts["json_schema"] is not None:
        raise ParameterError("invalid grammar: give --grammar or --json-schema, not both")
    if opts["grammar"] is not None:
        grammar_text(opts["grammar"])
    if opts["json_schema"] is not None:
        load_schema(opts["json_schema"])


def engine_arguments(model: str | None, opts: dict, probe_devices: bool = True):
    """Resolve MODEL/--draft (names, paths, downloads) and build the engine's typed settings
    from the options: (target path, draft path or None, config.EngineSettings), plain values
    that `lsd serve` hands to its engine process (it passes probe_devices=False, so that its
    HTTP process never loads llama.cpp)."""
    from ..config import engine_settings
    from ..models.resolve import resolve_models

    found = resolve_models(model, opts["draft"], opts["drafter"],
                           offload_expected(opts, probe_devices), notify=notify)
    settings = engine_settings(
        drafter=found.drafter,
        rule=opts["rule"] or found.rule or "strict", k=opts["k"], p_min=opts["p_min"],
        **{name: opts[name] for name in ("theta", "window", "entropy_top_k", "entropy",
                                         "gate", "max_exceptions", "budget")},
        n_ctx=opts["ctx"] or found.ctx or N_CTX, n_threads=opts["threads"],
        n_gpu_layers=opts["n_gpu_layers"], draft_n_gpu_layers=opts["draft_n_gpu_layers"],
        device=opts["device"], draft_device=opts["draft_device"], main_gpu=opts["main_gpu"],
        split_mode=opts["split_mode"], tensor_split=_tensor_split(opts["tensor_split"]),
        no_repack=True if opts["no_repack"] else None, verbose=opts["verbose"],
        rpc=opts["rpc"], chat_template=found.chat_template, remember=not opts["fresh"],
        suffix_tokens=opts["suffix_tokens"])
    return found.target, found.draft, settings


def offload_expected(opts: dict, probe_devices: bool) -> bool:
    """Will the models run on a GPU (then auto fetches a registry model's draft)? An explicit
    layer count says; "auto" asks the device registry (when probing is allowed)."""
    layers = opts["n_gpu_layers"]
    if isinstance(layers, int):
        return layers != 0
    if opts["rpc"]:
        return True
    if not probe_devices or opts["device"] == "none":
        return False
    from ..backend.devices import list_devices

    return any(device.takes_layers for device in list_devices())


def load_engine(model: str | None, opts: dict):
    """Resolve MODEL/--draft (names, paths, downloads) and build an Engine."""
    from ..engine import Engine

    target, draft, settings = engine_arguments(model, opts)
    with warnings.catch_warnings():  # the engine's notices are printed below, once
        warnings.simplefilter("ignore")
        engine = Engine.from_settings(target, draft, settings)
    for notice in engine.notices:
        notify(notice)
    notify(placement_line(engine.placement))
    return engine


def placement_line(placement: dict[str, str]) -> str:
    """Where each model runs, in one line: "placement: target CPU; draft 25/25 layers on
    CUDA0"."""
    return "placement: " + "; ".join(f"{role} {where}" for role, where in placement.items())


def _tensor_split(text: str | None) -> list[float] | None:
    if not text:
        return None
    try:
        return [float(x) for x in text.split(",")]
    except ValueError:
        raise ParameterError(f"invalid tensor_split: {text!r} (comma-separated numbers)") \
            from None


def notify(message: str) -> None:
    """A line for the user on stderr (stdout carries only the answer)."""
    click.echo(message, err=True)


MODEL_OPTION = click.option(
    "-m", "--model", "model_option", default=None, metavar="MODEL", envvar="LSD_MODEL",
    shell_complete=lambda ctx, param, incomplete: complete_model(ctx, param, incomplete),
    help="The model: a name from `lsd models`, a Hub name or a .gguf path (scripts should use "
         "it: then no argument is ever taken for a model).")
SHOW_DRAFTS_OPTION = click.option(
    "--show-drafts", is_flag=True,
    help="Colour tokens by origin: green = draft kept exactly, yellow = draft kept loosely, "
         "plain = produced by the target.")


def use_colour() -> bool:
    """Colours only on a terminal and when NO_COLOR is unset."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def generation_options(func):
    """The options every command that loads models and answers takes (run, chat): the model,
    the engine's, the sampler's, tools and --show-drafts."""
    return with_options([MODEL_OPTION] + ENGINE_OPTIONS + SAMPLING_OPTIONS + TOOL_OPTIONS
                        + [SHOW_DRAFTS_OPTION])(func)


def complete_model(ctx, param, incomplete: str) -> list:
    """Shell completion of MODEL: registry names, then files (the shell completes paths)."""
    from click.shell_completion import CompletionItem

    from ..models.registry import load_registry

    try:
        names = sorted(load_registry())
    except Exception:  # noqa: BLE001 - a broken user registry must not break completion
        names = []
    return ([CompletionItem(name) for name in names if name.startswith(incomplete)]
            + [CompletionItem(incomplete, type="file")])
