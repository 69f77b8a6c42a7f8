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


# written here, the way Gemma 2's and Gemma 3's templates check their roles: no system
# role (Gemma 2), user and model in turn, no tool role
ALTERNATING = ("{%- if messages[0].role == 'system' -%}"
               "{{- raise_exception('System role not supported') -}}{%- endif -%}"
               "{%- for m in messages -%}{%- if (m.role == 'user') != (loop.index0 % 2 == 0) -%}"
               "{{- raise_exception('Conversation roles must alternate user/assistant/...') -}}"
               "{%- endif -%}{{- m.role + ': ' + m.content + '\\n' -}}{%- endfor -%}")


def test_a_template_without_system_role_or_tools_gets_them_as_user_text():
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "-3 C"},
                {"role": "user", "content": "And tomorrow?"}]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    text = render_chat(ALTERNATING, messages, tools=tools)
    lines = text.split("\n")
    assert lines[0].startswith("user: Be brief.") and "get_weather" in text  # tools told
    assert 'assistant: {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}' \
        in lines
    assert '{"tool_response": {"tool": "get_weather", "content": "-3 C"}}' in text
    assert text.rstrip().endswith("And tomorrow?")  # (the result and the question: one turn)


def test_templates_may_append_to_their_own_lists_and_dump_lazy_filters():
    template = ("{%- set ids = [] -%}{%- for m in messages -%}{%- set _ = ids.append(m.role) -%}"
                "{%- endfor -%}{{- ids | tojson -}}|"
                "{{- messages | map(attribute='role') | tojson -}}")
    assert render_chat(template, [{"role": "user", "content": "hi"}]) == '["user"]|["user"]'


def test_an_earlier_turns_reasoning_reaches_lfm2s_template_as_thinking():
    template = ("{{- 'List of tools: [' -}}{%- for m in messages -%}"
                "{%- if m.thinking is defined -%}{{- '<think>' + m.thinking + '</think>' -}}"
                "{%- endif -%}{{- m.content + '|' -}}{%- endfor -%}")
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello", "reasoning_content": "greet back"}]
    assert render_chat(template, messages) == "List of tools: [hi|<think>greet back</think>hello|"


def test_every_system_message_heads_the_user_turn_after_it_and_an_empty_one_goes():
    messages = [{"role": "system", "content": ""}, {"role": "user", "content": "A"},
                {"role": "assistant", "content": "a"}, {"role": "user", "content": "B"},
                {"role": "system", "content": "Now in French."},
                {"role": "user", "content": "C"}]
    assert render_chat(ALTERNATING, messages) == (
        "user: A\nassistant: a\nuser: B\n\nNow in French.\n\nC\n")


def test_the_users_own_turns_stay_apart_so_a_conversation_keeps_its_prefix():
    chatml = ("{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + "
              "'<|im_end|>\\n' -}}{%- endfor -%}")
    first = [{"role": "user", "content": "A"}, {"role": "user", "content": "B"}]
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    later = first + [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": "c1", "content": "done"}]
    assert render_chat(chatml, later).startswith(render_chat(chatml, first))


def test_a_template_cannot_change_what_it_is_given_for_the_next_request():
    kwargs = {"seen": ["a"]}
    template = "{%- set _ = seen.append('x') -%}{{- seen | length -}}"
    assert [render_chat(template, [{"role": "user", "content": "hi"}], **kwargs)
            for _ in range(2)] == ["2", "2"] and kwargs == {"seen": ["a"]}


# Cohere2 MoE's switch, as its template reads it (its default from reasoning_effort)
COHERE2 = ("{%- set reasoning = reasoning if reasoning is not undefined else (false if "
           "reasoning_effort is defined and reasoning_effort | lower == 'none' else true) -%}"
           "{%- for m in messages %}<|START_TEXT|>{{ m.content }}<|END_TEXT|>{%- endfor %}"
           "<|CHATBOT_TOKEN|>{% if reasoning %}<|START_THINKING|>{% else %}<|START_THINKING|>"
           "<|END_THINKING|>{% endif %}")


def test_enable_thinking_is_given_to_the_switch_cohere2_moe_reads():
    ask = [{"role": "user", "content": "hi"}]
    on, off = "<|START_THINKING|>", "<|START_THINKING|><|END_THINKING|>"
    assert render_chat(COHERE2, ask).endswith(on)  # (its default)
    assert render_chat(COHERE2, ask, enable_thinking=False).endswith(off)
    assert render_chat(COHERE2, ask, enable_thinking=True).endswith(on)
    assert render_chat(COHERE2, ask, enable_thinking=False, reasoning=True).endswith(on)
    assert render_chat(COHERE2, ask, reasoning_effort="none").endswith(off)


def test_a_tool_without_a_description_renders_with_an_empty_one():
    """OpenAI's description is optional; Apertus's template writes `"// " +
    tool.function.description`, which failed (a 400 for a valid request). The request's own
    tools are not changed."""
    from lsd_local.chat.templates import render_chat

    tools = [{"type": "function", "function": {"name": "now", "parameters": {}}}]
    template = ("{%- for t in tools %}{{ '// ' + t.function.description + '|' + "
                "t.function.name }}{%- endfor %}{{ messages[0].content }}{# <tool_call> #}")
    assert render_chat(template, [{"role": "user", "content": "hi"}], tools=tools) == \
        "// |nowhi"
    assert "description" not in tools[0]["function"]


def test_an_empty_or_null_list_of_tool_calls_is_no_calls():
    """A client may send `"tool_calls": []` or null on a text turn; MiniMax-M1's template
    tests `'tool_calls' in message` and then dropped the turn's text for an empty call block
    (null: a TypeError). llama.cpp leaves them out; so does lsd."""
    template = ("{%- for m in messages %}{%- if 'tool_calls' in m %}{{ 'CALLS' }}"
                "{%- for c in m.tool_calls %}{{ c.function.name }}{%- endfor %}"
                "{%- else %}{{ m.content }}{%- endif %}{%- endfor %}")
    for empty in ([], None):
        messages = [{"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "hello", "tool_calls": empty}]
        assert render_chat(template, messages, add_generation_prompt=False) == "hihello"
