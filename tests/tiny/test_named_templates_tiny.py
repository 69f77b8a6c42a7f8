"""A GGUF that names a "tool_use" chat template beside its default (Hermes 2 Pro, Hermes 3,
Command R): a request with tools is rendered by the tool_use template and its calls are read
in that template's format, as transformers and llama.cpp do; a request without tools, and a
template the user gave, go on as before."""

from __future__ import annotations

import pytest
import serving
from tinymodels import AGENT_ASK as ASK
from tinymodels import (
    AGENT_TEMPLATE,
    CHAT_TEMPLATE,
    TINY_CTX,
    TOOLLESS_TEMPLATE,
    agent_token,
    stop_bias,
)
from tinymodels import AGENT_TOOLS as TOOLS
from tinymodels import valid_call as valid

from lsd_local import Engine
from lsd_local.chat.templates import tool_use_template


@pytest.fixture(scope="module")
def named(tiny_named):
    with Engine.load(tiny_named, drafter="lookup", n_ctx=TINY_CTX) as eng:
        yield eng


def test_the_gguf_gives_each_named_template(named):
    assert named.target.chat_template() == TOOLLESS_TEMPLATE
    assert named.target.chat_template("tool_use") == AGENT_TEMPLATE
    assert named.target.chat_template("rag") is None


def test_tools_are_rendered_by_the_tool_use_template(named):
    with_tools = named.prompt_text(ASK, tools=TOOLS)
    assert "# Tools\n<tools>" in with_tools and '"name": "get_weather"' in with_tools
    assert "You can call these tools" not in with_tools  # lsd's fallback for a toolless one
    without = named.prompt_text(ASK)
    assert "<tools>" not in without and without.startswith("<|im_start|>")


def test_calls_are_written_and_read_in_the_tool_use_templates_format(named):
    opener = agent_token(named.target.vocab, "<tool_call>")
    gen = named.generate(ASK, tools=TOOLS, tool_choice="required", max_tokens=120,
                         parallel_tool_calls=False,
                         logit_bias=stop_bias(named, {opener: 60.0})).run()
    assert gen.tool_calls and all(valid(c) for c in gen.tool_calls), gen.tool_calls
    assert gen.tokens[0] == opener and gen.finish_reason == "tool_calls"
    assert gen.stats.prompt_tokens == len(named.prompt_tokens(ASK, tools=TOOLS))


def test_a_template_the_user_gives_serves_requests_with_tools_too(tiny_named):
    with Engine.load(tiny_named, drafter="none", n_ctx=TINY_CTX,
                     chat_template=CHAT_TEMPLATE) as eng:
        text = eng.prompt_text(ASK, tools=TOOLS)
    assert "<tools>" not in text and "You can call these tools" in text


def test_lsd_serve_renders_and_reads_calls_by_the_tool_use_template(tiny_named, named):
    opener = agent_token(named.target.vocab, "<tool_call>")
    with serving.Server(tiny_named, "--ctx", str(TINY_CTX), "--drafter", "lookup") as srv:
        answer = srv.client().chat.completions.create(
            model="x", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=150,
            parallel_tool_calls=False,
            logprobs=True, extra_body={"logit_bias": {"2": 30, str(opener): 60}})
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    assert choice.logprobs.content[0].token == "<tool_call>"


# older Command R's tool_use template asks for calls lsd does not read back (an "Action:"
# list): written here for the test
ACTION_TEMPLATE = (
    "{%- for tool in tools %}{{- tool.function.name + '\\n' }}{%- endfor %}"
    "{{- 'Write \\'Action:\\' followed by a json-formatted list of actions: [{\"tool_name\": "
    "..., \"parameters\": {...}}]\\n' }}"
    "{%- for m in messages %}{{- m.role + ': ' + m.content + '\\n' }}{%- endfor %}")


@pytest.mark.parametrize("named, used", [(AGENT_TEMPLATE, AGENT_TEMPLATE),
                                         (ACTION_TEMPLATE, None), (TOOLLESS_TEMPLATE, None),
                                         (None, None)])
def test_a_tool_use_template_serves_only_where_lsd_reads_its_calls(named, used):
    assert tool_use_template(named) == used
