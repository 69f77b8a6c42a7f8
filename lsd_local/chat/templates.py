"""Chat messages -> prompt text with the GGUF's own Jinja chat template, given what
Transformers' apply_chat_template gives it: `messages` (assistant turns with `tool_calls`,
`tool` turns with `tool_call_id`), `tools`, `add_generation_prompt`, the BOS/EOS text and
template kwargs (`enable_thinking`, `reasoning_effort`, ...). A template that cannot render
tools gets them in the system message (chat/tools.py, FALLBACK_SYSTEM) and earlier calls and
results as text; where a family's template expects messages otherwise (Gemma 2's refuses a
system turn, Mistral's 9-character ids, LFM2's `thinking`), they are made so, as llama.cpp
makes them."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache

from ..errors import ContextOverflowError, LsdError, ParameterError
from . import functionarycalls, gemmacalls, pythoncalls
from .harmony import MARKERS as HARMONY_MARKERS
from .harmony import is_harmony, template_messages
from .literal import Shield
from .thinking import FAMILIES, THINK
from .tools import FALLBACK_SYSTEM, renders_tools, template_arguments
from .turns import (
    NINE_CHAR_IDS,
    NO_SYSTEM,
    firefunction_kwargs,
    nine_char_ids,
    system_into_user,
    thinking_switch,
    tool_turns_as_text,
    with_thinking,
)

# Used only when a GGUF ships no template at all: ChatML, which many instruct models know.
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _raise(message: str) -> None:
    raise LsdError(f"chat template: {message}")


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys, default=_listed)


def _listed(value: object) -> list:
    """What Jinja's filters hand on lazily (`map`, `select`: generators) as a JSON list."""
    if isinstance(value, (map, filter, range)) or hasattr(value, "__next__"):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


@lru_cache(maxsize=8)
def _compile(template: str):
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import SandboxedEnvironment

    from .jinjaext import GenerationTag

    # (sandboxed, but a template may append to its own lists, as Kimi K2's does and
    # llama.cpp allows: the messages and tools it gets are lsd's copies)
    env = SandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                               extensions=[jinja2.ext.loopcontrols, GenerationTag])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template)
    except (jinja2.TemplateError, SyntaxError) as exc:  # (a {% break %} out of its loop)
        raise LsdError(f"the model's chat template does not parse: {exc}") from None


def _content(message: dict, i: int) -> str:
    """A message's content as one string: text parts joined (OpenAI's content lists), null
    as "" (an assistant turn that only calls tools: templates add text to it)."""
    content = message.get("content")
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or \
                    not isinstance(part.get("text"), str):
                raise ParameterError(f"invalid messages.{i}.content.{j}: only text parts are "
                                     "supported", param=f"messages.{i}.content")
            parts.append(part["text"])
        return "".join(parts)
    if content is None:
        return ""
    if not isinstance(content, str):
        raise ParameterError(f"invalid messages.{i}.content: a string (or text parts)",
                             param=f"messages.{i}.content")
    return content


def _tool_calls(calls: object, i: int) -> list[dict]:
    """An assistant turn's OpenAI tool_calls, their arguments as objects for the template."""
    if not isinstance(calls, list):
        raise ParameterError(f"invalid messages.{i}.tool_calls: a list",
                             param=f"messages.{i}.tool_calls")
    out = []
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ParameterError(f"invalid messages.{i}.tool_calls.{j}: needs "
                                 "function.name", param=f"messages.{i}.tool_calls")
        function = {**function, "arguments": template_arguments(function.get("arguments", {}))}
        out.append({**call, "type": call.get("type", "function"), "function": function})
    return out


def template_tools(tools: Sequence[dict]) -> list[dict]:
    """The tools as a template reads them: copies (a template may change what it is given),
    each function with a description, "" where the request gave none (OpenAI's is optional,
    and a template that writes `"// " + tool.function.description`, Apertus's, failed)."""
    copied = copy.deepcopy(list(tools))
    for tool in copied:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and "description" not in function:
            # (after the name, where llama.cpp writes it: templates dump the tools as JSON)
            tool["function"] = {"name": function.get("name"), "description": "", **function}
    return copied


def normalize_messages(messages: Sequence[dict]) -> list[dict]:
    """Messages as templates expect them (ParameterError names a bad field): string roles and
    content, tool calls' arguments as objects (an empty or null list of them left out), and
    every tool turn answering a call made before it (its tool_call_id)."""
    if not messages:
        raise ParameterError("invalid messages: no chat messages given", param="messages")
    out, call_ids = [], set()
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ParameterError(f"invalid messages.{i}: needs a string role",
                                 param=f"messages.{i}.role")
        clean = {**message, "content": _content(message, i)}
        if message.get("tool_calls"):
            clean["tool_calls"] = _tool_calls(message["tool_calls"], i)
            call_ids |= {c.get("id") for c in clean["tool_calls"] if c.get("id")}
        elif "tool_calls" in message:  # (null or []: no calls, as llama.cpp leaves them
            del clean["tool_calls"]    # out; templates that test `'tool_calls' in m` differ)
        if message["role"] == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in call_ids:
                raise ParameterError(f"invalid messages.{i}.tool_call_id: {call_id!r} answers "
                                     "no tool call made before it",
                                     param=f"messages.{i}.tool_call_id")
        out.append(clean)
    return out


def with_fallback_tools(messages: list[dict], tools: Sequence[dict]) -> list[dict]:
    """The tools in the system message, for a template that cannot render them."""
    note = FALLBACK_SYSTEM.format(tools=json.dumps(list(tools), ensure_ascii=False, indent=1))
    if messages and messages[0].get("role") == "system":
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{note}"}] + \
            messages[1:]
    return [{"role": "system", "content": note}] + messages


RENDER_ARGUMENTS = ("messages", "tools", "bos_token", "eos_token", "add_generation_prompt")
TEMPLATE_GLOBALS = ("raise_exception", "strftime_now")  # what _compile gives templates


def check_template_kwargs(kwargs: dict) -> None:
    """ParameterError for a template kwarg that lsd itself passes (the messages, the tools,
    ...: the request says those in their own fields) or that would hide a function templates
    call (range, raise_exception, ...)."""
    from jinja2.defaults import DEFAULT_NAMESPACE

    reserved = {*RENDER_ARGUMENTS, *DEFAULT_NAMESPACE, *TEMPLATE_GLOBALS}
    taken = sorted(set(kwargs) & reserved)
    if taken:
        raise ParameterError(f"invalid chat_template_kwargs: {', '.join(taken)} cannot be set "
                             "there (lsd passes them to the template itself)",
                             param="chat_template_kwargs")


def render_chat(template: str | None, messages: Sequence[dict], bos_token: str = "",
                eos_token: str = "", add_generation_prompt: bool = True,
                tools: Sequence[dict] | None = None, **template_kwargs) -> str:
    """Render `messages` (OpenAI chat messages) into the model's prompt text; `tools`: OpenAI
    function specifications; `template_kwargs`: what else the template reads."""
    clean = normalize_messages(messages)
    if is_harmony(template):
        clean = template_messages(clean)
    elif template and gemmacalls.is_gemma(template) and gemmacalls.OPENAI_MARKER not in template:
        clean = gemmacalls.template_messages(clean)  # (an older Gemma 4 template)
    elif functionarycalls.is_functionary(template):
        clean = functionarycalls.template_messages(clean)  # (arguments added to text)
    elif template and pythoncalls.is_python_calls(template):
        clean = with_thinking(clean)  # (LFM2's templates read an earlier turn's reasoning so)
    if template and NINE_CHAR_IDS.search(template):
        clean = nine_char_ids(clean)
    if not renders_tools(template):
        if "tool_calls" not in (template or ""):  # (else it shows calls its own way)
            clean = tool_turns_as_text(clean)
        if tools:
            clean, tools = with_fallback_tools(clean, tools), None
    if template and NO_SYSTEM in template:
        clean = system_into_user(clean)
    template_kwargs = firefunction_kwargs(template, tools,
                                          thinking_switch(template, template_kwargs))
    import jinja2

    compiled = _compile(template or CHATML)
    try:
        # (copies: a template may change the lists and dicts it is given)
        return compiled.render(**copy.deepcopy(template_kwargs), messages=clean,
                               bos_token=bos_token, eos_token=eos_token,
                               add_generation_prompt=add_generation_prompt,
                               tools=template_tools(tools) if tools else None)
    except jinja2.TemplateError as exc:
        raise LsdError(f"the model's chat template failed on these messages: {exc}") from None
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
        # a template fed values of unexpected types (a kwarg that is a list where it tests
        # a flag): the request's values, not a fault of lsd
        raise LsdError(f"the model's chat template failed on these messages and template "
                       f"kwargs: {type(exc).__name__}: {exc}") from None


# The families' reasoning and message markers that are no control tokens in some
# vocabularies: the user's spellings of them are masked where the answer's start is read
MARKUP = tuple(m for think in (THINK, *FAMILIES) for m in (think.open, think.close)) + \
    HARMONY_MARKERS


def _special(vocab, token: int) -> str:
    return vocab.token_bytes(token).decode("utf-8", "replace")


def tool_use_template(named: str | None) -> str | None:
    """The template that renders requests with tools, of a GGUF that names one "tool_use"
    beside its default (`named`; Hermes 2 Pro's and Hermes 3's default shows no tools):
    that one where it shows the tools in a format lsd reads calls in, else None (the default
    then serves, with the tools in FALLBACK_SYSTEM: a call form lsd cannot read back, such
    as older Command R's "Action:" list, would only be lost)."""
    return named if renders_tools(named) else None


def render_literal(template: str | None, messages: Sequence[dict], vocab,
                   tools: Sequence[dict] | None = None, **template_kwargs
                   ) -> tuple[str, list[int]]:
    """(prompt text, its tokens) of chat messages, the template given the vocabulary's BOS
    and EOS text (`vocab`: a backend Vocab). The messages' and tools' text is tokenized as
    text: only the template's markup yields control tokens (chat/literal.py)."""
    marked, shield = _render_marked(template, messages, vocab, tools, (), template_kwargs)
    return shield.reveal(marked), shield.tokens(marked)


def _render_marked(template: str | None, messages: Sequence[dict], vocab, tools,
                   hide: tuple[str, ...], template_kwargs: dict) -> tuple[str, Shield]:
    """The rendered text with the user's spellings of control tokens (and of `hide`)
    marked, and the Shield that reveals them."""
    check_template_kwargs(template_kwargs)
    shield = Shield(vocab, hide)
    marked = render_chat(template, shield.value(list(messages)),
                         bos_token=_special(vocab, vocab.bos_token),
                         eos_token=_special(vocab, vocab.eos_token),
                         tools=shield.value(list(tools)) if tools else None, **template_kwargs)
    return marked, shield


def render_prompt(template: str | None, messages: Sequence[dict], vocab,
                  tools: Sequence[dict] | None = None, **template_kwargs) -> str:
    """Chat messages as prompt text (render_literal's text)."""
    return render_literal(template, messages, vocab, tools, **template_kwargs)[0]


def prompt_tokens(template: str | None, prompt: str | Sequence[dict], vocab,
                  tools: Sequence[dict] | None = None, **template_kwargs) -> list[int]:
    """A raw prompt tokenized with the vocabulary's special tokens (BOS; a raw prompt is the
    client's own markup), or chat messages rendered by the template and tokenized."""
    if isinstance(prompt, str):
        return vocab.tokenize(prompt, add_special=True)
    return render_literal(template, prompt, vocab, tools, **template_kwargs)[1]


def prompt_text(template: str | None, prompt: str | Sequence[dict], vocab,
                tools: Sequence[dict] | None = None, **template_kwargs) -> str:
    """What `prompt_tokens` evaluates, as text for a program that tokenizes with special
    tokens and adds the vocabulary's BOS itself (llama.cpp's tools): a BOS text the template
    wrote is left out, since that program adds it as a token."""
    text = prompt if isinstance(prompt, str) else render_prompt(template, prompt, vocab,
                                                                tools, **template_kwargs)
    bos = _special(vocab, vocab.bos_token)
    return text[len(bos):] if vocab.add_bos and bos and text.startswith(bos) else text



def prompt_and_tokens(template: str | None, vocab, n_ctx: int, prompt: str | Sequence[dict],
                      plan=None, template_kwargs: dict | None = None
                      ) -> tuple[str | None, list[int]]:
    """(the rendered chat text, or None for a raw prompt; its tokens), checked to be a
    prompt that fits a context of n_ctx with room for one answer token. `plan`: the
    request's chat.tools.ToolPlan or None. The text is for reading the answer's start (does
    the prompt open a reasoning block?): in it, what the user's strings spell of a family's
    markers is masked, so that a question about "<think>" opens nothing."""
    if isinstance(prompt, str):
        if plan is not None:
            raise ParameterError("invalid tools: a raw prompt has no chat template to show "
                                 "them; send chat messages", param="tools")
        text, ids = None, vocab.tokenize(prompt, add_special=True)
    else:
        text, shield = _render_marked(template, prompt, vocab,
                                      plan.specs if plan is not None else None,
                                      MARKUP, template_kwargs or {})
        ids = shield.tokens(text)
    if not ids:
        raise ParameterError("invalid prompt: it is empty (no tokens)", param="prompt")
    if len(ids) + 1 > n_ctx:
        raise ContextOverflowError(f"the prompt has {len(ids)} tokens but the context holds "
                                   f"{n_ctx} (raise n_ctx or shorten the prompt)")
    return text, ids
