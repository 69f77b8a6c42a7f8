"""Chat messages -> prompt text with the GGUF's own Jinja chat template (as Transformers does)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache

from .errors import LsdError

# Used only when a GGUF ships no template at all: ChatML, which many instruct models know.
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _raise(message: str) -> None:
    raise LsdError(f"chat template: {message}")


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


@lru_cache(maxsize=8)
def _compile(template: str):
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template)
    except jinja2.TemplateError as exc:
        raise LsdError(f"the model's chat template does not parse: {exc}") from None


def validate_messages(messages: Sequence[dict]) -> None:
    """Each message needs a string role and content."""
    if not messages:
        raise LsdError("no chat messages given")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) \
                or not isinstance(m.get("content"), str):
            raise LsdError(f"chat message {i} needs string 'role' and 'content' fields")


def render_chat(template: str | None, messages: Sequence[dict], bos_token: str = "",
                eos_token: str = "", add_generation_prompt: bool = True) -> str:
    """Render `messages` ([{'role': ..., 'content': ...}]) into the model's prompt text."""
    validate_messages(messages)
    import jinja2

    compiled = _compile(template or CHATML)
    try:
        return compiled.render(messages=list(messages), bos_token=bos_token, eos_token=eos_token,
                               add_generation_prompt=add_generation_prompt)
    except jinja2.TemplateError as exc:
        raise LsdError(f"the model's chat template failed on these messages: {exc}") from None


def _special(vocab, token: int) -> str:
    return vocab.token_bytes(token).decode("utf-8", "replace")


def render_prompt(template: str | None, messages: Sequence[dict], vocab) -> str:
    """Chat messages as prompt text, the template given the vocabulary's BOS and EOS text
    (`vocab`: a backend Vocab)."""
    return render_chat(template, messages, bos_token=_special(vocab, vocab.bos_token),
                       eos_token=_special(vocab, vocab.eos_token))


def prompt_tokens(template: str | None, prompt: str | Sequence[dict], vocab) -> list[int]:
    """A raw prompt tokenized with the vocabulary's special tokens (BOS), or chat messages
    rendered by the template and tokenized: a BOS the template wrote is not added again."""
    if isinstance(prompt, str):
        return vocab.tokenize(prompt, add_special=True)
    text = render_prompt(template, prompt, vocab)
    bos = _special(vocab, vocab.bos_token)
    add_bos = vocab.add_bos and not (bos and text.startswith(bos))
    return ([vocab.bos_token] if add_bos else []) + vocab.tokenize(text, add_special=False)


def prompt_text(template: str | None, prompt: str | Sequence[dict], vocab) -> str:
    """What `prompt_tokens` evaluates, as text for a program that tokenizes with special
    tokens and adds the vocabulary's BOS itself (llama.cpp's tools): a BOS text the template
    wrote is left out, since that program adds it as a token."""
    text = prompt if isinstance(prompt, str) else render_prompt(template, prompt, vocab)
    bos = _special(vocab, vocab.bos_token)
    return text[len(bos):] if vocab.add_bos and bos and text.startswith(bos) else text
