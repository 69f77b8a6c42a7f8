"""External commands as `lsd bench` columns (llama.cpp's tools, `--external`): run one on a
prompt file, read the decode speed it prints and, for llama.cpp's own tools, its answer."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

from ..errors import LsdError

DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
SPEED_PATTERNS = (  # llama.cpp's examples, then anything that prints "<number> tok/s"
    (DECODED, "count_seconds"),
    (re.compile(r"eval time =\s+([\d.]+) ms /\s+(\d+) (?:runs|tokens)"), "ms_count"),
    (re.compile(r"([\d.]+)\s*(?:tok/s|tokens/s|tokens per second|t/s)"), "rate"),
)


def parse_speed(log: str) -> float | None:
    """Decode tokens/s from an external command's output, or None."""
    for pattern, form in SPEED_PATTERNS:
        matches = pattern.findall(log)
        if not matches:
            continue
        # llama-completion prints "prompt eval time" before "eval time": take the last match
        m = matches[-1]
        if form == "count_seconds":
            return int(m[0]) / float(m[1])
        if form == "ms_count":
            return int(m[1]) / float(m[0]) * 1000
        return float(m)
    return None


# What llama.cpp's tools print on stdout around the answer: whether the prompt comes first
# (after two newlines and maybe a BOS piece), what follows the answer, and the marker that
# follows it (then newlines: two or three, by version) when it ended with an
# end-of-generation token
TOOL_OUTPUT = {
    "llama-completion": (False, "\n\n", " [end of text]"),
    "llama-speculative-simple": (True, "\n\n\n\n", None),
}


def answer_text(command: list[str], stdout: str, prompt: str) -> str | None:
    """The answer a known llama.cpp tool printed (None for other commands, or when its
    output has not the expected shape)."""
    shape = TOOL_OUTPUT.get(Path(command[0]).name) if command else None
    if shape is None:
        return None
    echoes_prompt, after, eog_marker = shape
    text = stdout
    if echoes_prompt:
        at = stdout.find(prompt)
        if not stdout.startswith("\n\n") or at < 0:
            return None
        text = stdout[at + len(prompt):]
    if eog_marker is not None and text.rstrip("\n").endswith(eog_marker):
        return text.rstrip("\n")[:-len(eog_marker)]
    return text[:len(text) - len(after)] if text.endswith(after) else None


def decoded_count(log: str) -> int | None:
    """How many tokens llama.cpp's speculative example says it decoded (None: not said)."""
    found = DECODED.findall(log)
    return int(found[-1][0]) if found else None


# Tools that decode until they hold more than -n tokens, a whole round at a time, and say
# how many they decoded: run with -n max_tokens - 1 ({n_predict}), every round they run is
# one they need to reach the tokens asked, and the time they print is that time.
RUNS_PAST_N = ("llama-speculative-simple",)


def run_command(name: str, command: str, prompt: str, values: dict, max_tokens: int) -> dict:
    """Run `command` (placeholders filled from `values` and {prompt_file}) on a file holding
    `prompt` plus one newline: llama.cpp's -f drops one trailing newline (common/arg.cpp), and
    a chat prompt ends in one. Returns {"tps", "external"} and, for llama.cpp's tools, the
    answer ("text"). A RUNS_PAST_N tool that decoded more than max_tokens (its last round
    runs past them) is timed over the tokens asked, as lsd's columns are ("decoded" keeps its
    own count): the tokens asked in the time it printed, which is the time it took to reach
    them when it ran with -n max_tokens - 1."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False,
                                     encoding="utf-8", newline="") as f:
        f.write(prompt + "\n")
    try:
        cmd = [part.format(prompt_file=f.name, **values) for part in shlex.split(command)]
        out = subprocess.run(cmd, capture_output=True, timeout=900)
    except (OSError, KeyError, subprocess.TimeoutExpired) as exc:
        raise LsdError(f"external {name!r} failed: {exc}") from None
    finally:
        os.unlink(f.name)
    stdout, stderr = (stream.decode("utf-8", "replace") for stream in (out.stdout, out.stderr))
    log = stdout + stderr
    tps = parse_speed(log)
    if tps is None:
        raise LsdError(f"external {name!r}: no tokens/s in its output (exit "
                       f"{out.returncode}):\n{log[-800:]}")
    row = {"tps": tps, "external": True}
    decoded = decoded_count(stderr)  # (what it says, not what its answer says)
    if Path(cmd[0]).name in RUNS_PAST_N and decoded is not None and decoded > max_tokens:
        row.update(tps=tps * max_tokens / decoded, decoded=decoded)
    answer = answer_text(cmd, stdout, prompt)
    if answer is not None:  # (compared over the common part: it may run past -n)
        row.update(text=answer, may_run_past=True)
    return row
