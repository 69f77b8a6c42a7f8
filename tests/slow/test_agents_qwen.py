"""Agents on the real Qwen2.5-Coder pair through lsd serve and the `openai` SDK (-m slow): a
tool-calling round trip with two tools (required, a named tool, parallel calls, streamed
and not), and penalties with speculation equal to plain decoding with them."""

from __future__ import annotations

import json

import pytest
import serving

from lsd_local import Engine

pytestmark = pytest.mark.slow

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Current time in a timezone",
        "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}},
                       "required": ["timezone"]}}},
]
ASK = [{"role": "user", "content": "What is the weather in Paris in celsius, and what time "
                                   "is it in Europe/Paris?"}]


def check(call) -> dict:
    """The call's arguments, validated against its tool's schema."""
    args = json.loads(call.function.arguments)
    if call.function.name == "get_weather":
        assert isinstance(args["city"], str) and set(args) <= {"city", "unit"}
        assert args.get("unit", "celsius") in ("celsius", "fahrenheit")
    else:
        assert call.function.name == "get_time" and isinstance(args["timezone"], str)
        assert set(args) == {"timezone"}
    return args


@pytest.fixture(scope="module")
def server(qwen_pair):
    with serving.Server(qwen_pair[0], "--draft", str(qwen_pair[1]), "--ctx", "4096",
                        "--threads", "2", "--max-tokens", "256") as srv:
        yield srv


def test_a_tool_calling_round_trip_on_qwen(server):
    client = server.client()
    answer = client.chat.completions.create(model="x", messages=ASK, tools=TOOLS,
                                            tool_choice="required")
    message = answer.choices[0].message
    assert answer.choices[0].finish_reason == "tool_calls" and len(message.tool_calls) >= 1
    args = [check(call) for call in message.tool_calls]
    assert any("Paris" in json.dumps(a) for a in args)
    messages = ASK + [message.model_dump(exclude_none=True)] + [
        {"role": "tool", "tool_call_id": c.id, "content": "18 degrees, sunny"
         if c.function.name == "get_weather" else "14:05"} for c in message.tool_calls]
    follow = client.chat.completions.create(model="x", messages=messages, tools=TOOLS,
                                            tool_choice="none", max_tokens=80)
    assert follow.choices[0].message.content and not follow.choices[0].message.tool_calls
    assert follow.usage.prompt_tokens > answer.usage.prompt_tokens


def test_streamed_named_and_parallel_calls_on_qwen(server):
    client = server.client()
    choice = {"type": "function", "function": {"name": "get_time"}}
    named = client.chat.completions.create(model="x", messages=ASK, tools=TOOLS,
                                           tool_choice=choice).choices[0].message.tool_calls
    assert [c.function.name for c in named] == ["get_time"] and check(named[0])
    whole = client.chat.completions.create(model="x", messages=ASK, tools=TOOLS,
                                           tool_choice="required", parallel_tool_calls=True)
    calls = {}
    for chunk in client.chat.completions.create(model="x", messages=ASK, tools=TOOLS,
                                                tool_choice="required", stream=True):
        for piece in (chunk.choices[0].delta.tool_calls or ()) if chunk.choices else ():
            if piece.id:
                calls[piece.index] = [piece.function.name, ""]
            calls[piece.index][1] += piece.function.arguments or ""
    assert [tuple(calls[i]) for i in sorted(calls)] == [
        (c.function.name, c.function.arguments) for c in whole.choices[0].message.tool_calls]
    single = client.chat.completions.create(model="x", messages=ASK, tools=TOOLS,
                                            tool_choice="required",
                                            parallel_tool_calls=False)
    assert len(single.choices[0].message.tool_calls) == 1


def test_penalties_with_speculation_equal_plain_decoding_on_qwen(qwen_pair):
    prompt = [{"role": "user", "content": "Write a Python function that reverses a list, "
                                          "with a docstring."}]
    controls = {"repeat_penalty": 1.1, "presence_penalty": 0.3, "frequency_penalty": 0.2,
                "logit_bias": {"13": -2.0}}
    with Engine.load(qwen_pair[0], qwen_pair[1], drafter="auto", n_threads=2) as eng:
        eng.configure(drafter="none")
        plain = eng.generate(prompt, max_tokens=96, **controls).run().tokens
        eng.configure(drafter="lookup", k=16)
        lookup = eng.generate(prompt, max_tokens=96, **controls).run()
        eng.configure(drafter="model", k=4)
        model = eng.generate(prompt, max_tokens=96, **controls).run()
    assert lookup.tokens == plain and model.tokens == plain
    assert model.stats.accepted > 0


OSLO = [{"role": "user", "content": "What is the weather in Oslo in celsius? Use the tool."}]


def test_auto_reads_the_call_qwen_writes_as_a_fenced_json_block(server):
    """The reviewer's check: asked with tool_choice auto, Qwen2.5-Coder 1.5B answers with a
    fenced JSON object, not its template's <tool_call> tags; it is a call, streamed and not."""
    client = server.client()
    answer = client.chat.completions.create(model="x", messages=OSLO, tools=TOOLS,
                                            tool_choice="auto", temperature=0)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather" and check(call)["city"] == "Oslo"
    assert not (choice.message.content or "").strip()
    pieces, finish = {}, None
    for chunk in client.chat.completions.create(model="x", messages=OSLO, tools=TOOLS,
                                                tool_choice="auto", temperature=0,
                                                stream=True):
        for delta in chunk.choices[0].delta.tool_calls or []:
            pieces.setdefault(delta.index, [None, ""])
            pieces[delta.index][0] = delta.function.name or pieces[delta.index][0]
            pieces[delta.index][1] += delta.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and pieces[0][0] == "get_weather"
    assert json.loads(pieces[0][1]) == json.loads(call.function.arguments)
    # (the follow-up with the tool's result: this model calls the tool again, as a fenced
    # block, even with tool_choice "none"; without tools it answers "-3 degrees Celsius".
    # Noted in docs/server.md, not asserted.)


def test_a_json_example_is_not_a_call(server):
    ask = [{"role": "user", "content": "Show me a JSON example of a person with a name and "
                                       "an age, in a json code block."}]
    choice = server.client().chat.completions.create(
        model="x", messages=ask, tools=TOOLS, tool_choice="auto", temperature=0,
        max_tokens=80).choices[0]
    assert not choice.message.tool_calls and "```" in choice.message.content, choice


def test_langchain_tool_binding_gets_the_call(server):
    """A popular agent framework's tool binding (LangChain's ChatOpenAI.bind_tools, when it
    is installed: it is not one of lsd's dependencies): the call comes back as the
    framework's tool_calls, invoked and streamed."""
    langchain_openai = pytest.importorskip("langchain_openai")
    from langchain_core.tools import tool

    @tool
    def get_weather(city: str, unit: str = "celsius") -> str:
        """Current weather of a city. unit: celsius or fahrenheit."""
        return f"-3 degrees {unit}, snowing in {city}"

    llm = langchain_openai.ChatOpenAI(base_url=server.base_url, api_key="none", model="x",
                                      temperature=0, max_tokens=200, max_retries=0)
    bound = llm.bind_tools([get_weather])
    answer = bound.invoke(OSLO[0]["content"])
    assert [c["name"] for c in answer.tool_calls] == ["get_weather"]
    assert answer.tool_calls[0]["args"]["city"] == "Oslo"
    streamed = None
    for chunk in bound.stream(OSLO[0]["content"]):
        streamed = chunk if streamed is None else streamed + chunk
    assert [(c["name"], c["args"]) for c in streamed.tool_calls] == \
        [(c["name"], c["args"]) for c in answer.tool_calls]
