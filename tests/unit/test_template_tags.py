"""Chat templates that use transformers' `{% generation %}` tag (LFM2.5's and others'):
rendered as its body, as transformers renders it, instead of failing to parse."""

from __future__ import annotations

from lsd_local.chat.templates import render_chat

# written here, in the way LFM2.5's template marks the assistant's turns
TEMPLATE = ("{%- set ns = namespace(turns=0) -%}{%- for m in messages -%}"
            "{{- '<|im_start|>' + m.role + '\\n' -}}{%- if m.role == 'assistant' -%}"
            "{%- generation -%}{{- m.content + '<|im_end|>\\n' -}}"
            "{%- set ns.turns = ns.turns + 1 -%}{%- endgeneration -%}"
            "{%- else -%}{{- m.content + '<|im_end|>\\n' -}}{%- endif -%}{%- endfor -%}"
            "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
            "{%- if ns.turns != 1 -%}{{- raise_exception('a turn went uncounted') }}"
            "{%- endif -%}")  # (what a block sets in a namespace holds outside it)


def test_a_generation_block_renders_its_body():
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "bye"}]
    assert render_chat(TEMPLATE, messages) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n"
        "<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n")


def test_a_loop_control_out_of_its_loop_in_a_generation_block_is_a_clear_error():
    import pytest

    from lsd_local.errors import LsdError

    bad = "{% for m in messages %}{% generation %}{% break %}{% endgeneration %}{% endfor %}"
    with pytest.raises(LsdError, match="does not parse"):
        render_chat(bad, [{"role": "user", "content": "hi"}])
