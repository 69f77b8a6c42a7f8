"""How each model family marks its reasoning block, and which a chat template uses (the
answer's reader, chat/output.py, splits the block out; generation.py closes it when a
reasoning budget is spent)."""

from __future__ import annotations

from dataclasses import dataclass

from . import glmcalls, kimi3calls, mistralcalls


@dataclass(frozen=True)
class Thinking:
    """How a family marks its reasoning block."""

    open: str
    close: str
    budget_close: str  # what a spent reasoning budget writes (generation.py)
    ends: tuple[str, ...] = ()  # what else ends the block, kept as the answer's (a call)

    def opened_by(self, prompt_text: str) -> bool:
        """Whether a rendered prompt leaves the block open (a template that starts the
        model's reasoning itself: its answer begins inside the block)."""
        return prompt_text.rfind(self.open) > prompt_text.rfind(self.close)


THINK = Thinking("<think>", "</think>", "\n</think>\n\n")  # DeepSeek-R1, Qwen3, QwQ, ...
COMMANDR_THINK = Thinking("<|START_THINKING|>", "<|END_THINKING|>", "<|END_THINKING|>")
GEMMA_THINK = Thinking("<|channel>thought", "<channel|>", "<channel|>")  # Gemma 4's channel
MISTRAL_THINK = Thinking(mistralcalls.THINK_OPEN, mistralcalls.THINK_CLOSE,
                         mistralcalls.THINK_CLOSE)  # Magistral's, Ministral 3's
SEED_THINK = Thinking("<seed:think>", "</seed:think>", "</seed:think>")  # Seed-OSS's
# MiniMax-M3's: an answer without reasoning starts with a bare close
MM_THINK = Thinking("<mm:think>", "</mm:think>", "</mm:think>")
# Kimi K3's think section (its generation prompt opens it unless `thinking` is false); a
# spent budget opens the response section too
KIMI3_THINK = Thinking(kimi3calls.THINK_OPEN, kimi3calls.THINK_CLOSE,
                       kimi3calls.THINK_CLOSE + kimi3calls.RESPONSE_OPEN)
# Tencent Hy3's (its template builds the tags: found by is_hy3)
HY3_THINK = Thinking(f"<think{glmcalls.HY}>", f"</think{glmcalls.HY}>",
                     f"</think{glmcalls.HY}>")
# Apertus's (its template's "Deliberation: enabled" for enable_thinking)
APERTUS_THINK = Thinking("<|inner_prefix|>", "<|inner_suffix|>", "<|inner_suffix|>")
FAMILIES = (COMMANDR_THINK, GEMMA_THINK, MISTRAL_THINK, SEED_THINK, MM_THINK, KIMI3_THINK,
            HY3_THINK, APERTUS_THINK)
# Apriel 1.6's: its generation prompt opens the reasoning in words, a marker ends it
APRIEL_THINK = Thinking("Here are my reasoning steps:\n", "[BEGIN FINAL RESPONSE]",
                        "\n[BEGIN FINAL RESPONSE]\n")
REASONING_CLOSE = THINK.budget_close
# Ling 3's: its reasoning may run into a call without its close (llama.cpp ends it there)
LING3_THINK = Thinking("<think>", "</think>", THINK.budget_close, ends=(glmcalls.OPEN,))
LING3_SIGN = "<role>ASSISTANT</role>"  # (and GLM's argument tags: llama.cpp's detection)


def thinking_of(template: str | None) -> Thinking:
    """The reasoning markers of a template's family (Command R7B's, Gemma 4's, Mistral's,
    Seed-OSS's, MiniMax-M3's, Kimi K3's, Hy3's, Apertus's, Ling 3's, Apriel 1.6's, else
    `<think>`)."""
    if kimi3calls.is_kimi3(template):  # (its template writes the section's name apart)
        return KIMI3_THINK
    if glmcalls.is_hy3(template):
        return HY3_THINK
    if template and LING3_SIGN in template and glmcalls.is_glm(template):
        return LING3_THINK
    for think in FAMILIES:
        if template and think.open in template:
            return think
    if template and "Here are my reasoning steps:" in template and \
            APRIEL_THINK.close in template:
        return APRIEL_THINK
    return THINK
