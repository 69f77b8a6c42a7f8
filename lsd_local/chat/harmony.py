"""gpt-oss's "harmony" format. An answer is a run of messages, each a header and a body:

    <|channel|>analysis<|message|>The user wants the weather...<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json
    <|message|>{"city": "Oslo"}                       (then <|call|> ends the generation)

or `...<|start|>assistant<|channel|>final<|message|>It is 18 C.` (then <|return|>). The
generation prompt ends with `<|start|>assistant`, so the first header has no `<|start|>`.
The analysis channel is reasoning; a message to a recipient `functions.NAME` (named in the
channel's header, or in the role's: `<|start|>assistant to=functions.NAME<|channel|>
commentary json`) is a call whose body is its arguments' JSON; the final channel, and
commentary to nobody (a preamble), are content. llama.cpp renders these markers as text (it
makes them user-defined tokens); `<|return|>` and `<|call|>` end the generation and show
nothing. A call ends the answer, so the format has no parallel calls.
"""

from __future__ import annotations

import re

from .gbnfparts import literal, renamed, until_rules

START, CHANNEL, MESSAGE, END = "<|start|>", "<|channel|>", "<|message|>", "<|end|>"
CALL_PREFIX = "functions."
MARKERS = (START, CHANNEL, MESSAGE, END, "<|constrain|>")
# What a spent reasoning budget writes: the analysis message ends and the answer begins;
# where a call may follow, the next message is the model's to choose (once: an analysis
# after that is closed into the answer), and with tool_choice "required" it is the call
REASONING_CLOSE = f"{END}{START}assistant{CHANNEL}final{MESSAGE}"
REASONING_CLOSE_OPEN = f"{END}{START}assistant"
REASONING_CLOSE_TO_CALL = f"{END}{START}assistant{CHANNEL}commentary to={CALL_PREFIX}"
# Lazy tool-call triggers (tool_choice "auto"): a function recipient in the channel's
# header, or in the role's (also the first message's, whose `<|start|>assistant` the prompt
# wrote); the grammar starts at the group. Other recipients (`to=assistant`, which gpt-oss
# sometimes writes before a channel, a built-in tool) start nothing.
TRIGGERS = (r"(<\|channel\|>(?:commentary|analysis) to=functions)",
            r"<\|start\|>assistant( to=functions)", r"^( to=functions)")
_CHANNEL = re.compile(r"<\|channel\|>\s*([A-Za-z_]+)")
_RECIPIENT = re.compile(r"\bto=(functions\.[^\s<]+)")


def is_harmony(template: str | None) -> bool:
    """A template in the harmony format (what llama.cpp's common/chat.cpp checks too)."""
    return bool(template) and CHANNEL in template


def read_header(header: str) -> tuple[str, str | None]:
    """(channel, function recipient or None) of one message's header text (before
    `<|message|>`): the last channel named (gpt-oss sometimes writes a stray
    `<|channel|>commentary to=assistant` before the real one)."""
    channels = _CHANNEL.findall(header)
    recipient = _RECIPIENT.search(header)
    return (channels[-1] if channels else "final"), (recipient.group(1) if recipient
                                                     else None)


# --- grammars ------------------------------------------------------------------------------

CONSTRAINT_RULE = 'h-constraint ::= (" <|constrain|>json" | "<|constrain|>json" | " json")?'
ANALYSIS_RULE = f'h-analysis ::= "{CHANNEL}analysis{MESSAGE}" h-text "{END}{START}assistant"'
_OPENED = f'h-text "{END}{START}assistant" '  # the rest of an analysis the prompt opened


def call_grammar(tools, required: bool, to_gbnf, opened: bool = False) -> str:
    """GBNF for one call to any of `tools` (chat.tools.Tool), a recipient in the channel's
    header or in the role's; `required`: from the answer's first token, after any analysis
    messages (else from a lazy trigger, TRIGGERS). `to_gbnf`: the JSON-schema converter;
    `opened`: the prompt left an analysis message open (the answer ends it first)."""
    rules, in_channel, in_role = [], [], []
    for t, tool in enumerate(tools):
        rules.append(renamed(to_gbnf(tool.parameters), f"h{t}-"))
        name = literal(tool.name)
        in_channel.append(f'"{name}" h-constraint "{MESSAGE}" h{t}-root')
        in_role.append(f'"{name}{CHANNEL}" h-channel h-constraint "{MESSAGE}" h{t}-root')
    call = (f'h-call ::= "{CHANNEL}" h-channel " to={CALL_PREFIX}" ({" | ".join(in_channel)})'
            f' | " to={CALL_PREFIX}" ({" | ".join(in_role)})')
    root = f"root ::= {_OPENED if opened else ''}h-analysis* h-call" if required else \
        "root ::= h-call"
    return "\n".join([root, call, 'h-channel ::= "commentary" | "analysis"', CONSTRAINT_RULE,
                      ANALYSIS_RULE, *until_rules("h-text", END), *rules])


def final_grammar(schema_gbnf: str, opened: bool = False) -> str:
    """GBNF for an answer under a JSON schema (`schema_gbnf`, its converted grammar): any
    analysis messages, then the final channel's body in the schema (as llama.cpp does);
    `opened`: the prompt left an analysis message open (the answer ends it first)."""
    head = f"root ::= {_OPENED if opened else ''}h-analysis* "
    return "\n".join([f'{head}"{CHANNEL}final" h-constraint "{MESSAGE}" hs-root',
                      CONSTRAINT_RULE, ANALYSIS_RULE, *until_rules("h-text", END),
                      renamed(schema_gbnf, "hs-")])


def template_messages(messages: list[dict]) -> list[dict]:
    """Messages as the gpt-oss template reads them: an assistant turn's reasoning as
    `thinking` (OpenAI clients send it back as `reasoning_content`); with tool calls, its
    content left out (the template refuses content and thinking beside calls; llama.cpp
    drops the content too)."""
    out = []
    for m in messages:
        if isinstance(m.get("reasoning_content"), str) and "thinking" not in m:
            m = {**m, "thinking": m["reasoning_content"]}
            if m.get("tool_calls"):
                m.pop("content", None)
        out.append(m)
    return out
