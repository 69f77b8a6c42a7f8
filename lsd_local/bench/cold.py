"""`lsd bench --cold`: each run a separate `lsd run --json` process, what a script that calls
lsd once per request sees: model loading aside, the first rounds of every answer, with what
auto remembered from the earlier processes (drafters/auto/learned.py) and nothing else."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ..config import DEFAULT_K
from ..errors import LsdError

# bench parameter -> `lsd run` option (the ones run takes; others cannot run cold)
RUN_OPTIONS = {"theta": "--theta", "window": "--window", "entropy_top_k": "--entropy-top-k",
               "entropy": "--entropy", "gate": "--gate", "max_exceptions": "--max-exceptions",
               "budget": "--budget", "p_min": "--p-min"}
TIMEOUT = 900  # seconds one process may take


def run_command(models, config, item, max_tokens: int) -> list[str]:
    """The `lsd run` command line for one configuration and prompt."""
    if models.chat_template is not None:  # `lsd run -m PATH` would use the GGUF's own
        raise LsdError("--cold cannot pass a registry chat template to `lsd run`; give the "
                       ".gguf path of a model that uses its own")
    messages = list(item.messages)
    system = [m["content"] for m in messages[:-1] if m["role"] == "system"]
    if messages[-1]["role"] != "user" or len(messages) - len(system) != 1:
        raise LsdError(f"--cold runs single-turn prompts (a system message and one user "
                       f"message); {item.set_name}/{item.id} has {len(messages)} messages")
    cmd = [sys.executable, "-m", "lsd_local", "run", "--json", "-m", str(models.target),
           "--ctx", str(models.n_ctx), "--max-tokens", str(max_tokens),
           "--drafter", config.drafter if config.kind == "lsd" else "none",
           "--rule", config.rule,
           "--suffix-tokens", "0"]  # (another configuration's answer must not be drafted)
    if models.draft is not None and config.kind == "lsd" and config.drafter != "lookup":
        cmd += ["--draft", str(models.draft)]
    else:
        cmd += ["--draft", "none"]
    k = config.k if config.k is not None else DEFAULT_K.get(config.drafter)
    if k is not None and config.kind == "lsd":  # as in-process: a fixed K unless named auto
        cmd += ["-k", str(k)]
    for name, value in config.params:
        if name not in RUN_OPTIONS:
            raise LsdError(f"--cold: `lsd run` has no option for {name!r} ({config.name})")
        cmd += [RUN_OPTIONS[name], str(value)]
    for flag, value in (("--threads", models.n_threads), ("--rpc", models.rpc),
                        ("--grammar", config.grammar), ("--system", system[0] if system
                                                        else None)):
        if value is not None:
            cmd += [flag, str(value)]
    return cmd  # the prompt goes on stdin: it may start with "-" or be long


def run_cold(models, config, item, max_tokens: int) -> dict:
    """One configuration on one prompt in a fresh process: its speed and counters."""
    cmd = run_command(models, config, item, max_tokens)
    # as a user's run (state remembered), but no LSD_RUN_* setting of the caller's may
    # change the configuration under test
    env = {k: v for k, v in os.environ.items()
           if k != "LSD_NO_STATE" and not k.startswith("LSD_RUN_") and k != "LSD_MODEL"}
    try:
        out = subprocess.run(cmd, input=item.messages[-1]["content"], capture_output=True,
                             text=True, timeout=TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        raise LsdError(f"--cold: {config.name} on {item.id} took over {TIMEOUT} s") from None
    if out.returncode:
        raise LsdError(f"--cold: {config.name} on {item.id} failed:\n{out.stderr[-800:]}")
    result = json.loads(out.stdout)
    s = result["stats"]
    return {"text": result["text"], "tokens": result["tokens"],
            "n_tokens": s["generated_tokens"],
            "tps": s["decode_tokens_per_second"], "prefill_s": s["prefill_seconds"],
            "tau": s["tau"], "acceptance": s["acceptance_rate"], "drafted": s["drafted"],
            "accepted": s["accepted"], "loose": s["accepted_loose"], "rounds": s["rounds"],
            "draft_s": s["draft_seconds"], "verify_s": s["verify_seconds"],
            "other_s": s["other_seconds"], "constrain_s": s["constrain_seconds"],
            "draft_sources": s["draft_sources"],
            "draft_lengths": {int(k): v for k, v in s["draft_lengths"].items()},
            "finish_reason": result["finish_reason"]}
