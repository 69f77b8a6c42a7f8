"""Tool call ids for Mistral's templates, which refuse any id that is not 9 letters and
digits: made so in the call and in its result alike, the same in every turn."""

from __future__ import annotations

import copy
import re

from lsd_local.chat.turns import nine_char_ids

CALLS = [{"id": "call_0123456789abcdef01234567", "type": "function",
          "function": {"name": "f", "arguments": "{}"}},
         {"id": "Ab3De6Gh9", "type": "function", "function": {"name": "g", "arguments": "{}"}}]
MESSAGES = [{"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": CALLS},
            {"role": "tool", "tool_call_id": CALLS[0]["id"], "content": "F"},
            {"role": "tool", "tool_call_id": "Ab3De6Gh9", "content": "G"}]


def test_ids_become_nine_characters_alike_in_calls_and_results():
    before = copy.deepcopy(MESSAGES)
    out = nine_char_ids(MESSAGES)
    assert before == MESSAGES  # (the caller's messages are left alone)
    ids = [c["id"] for c in out[1]["tool_calls"]]
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", i) for i in ids) and ids[1] == "Ab3De6Gh9"
    assert [m["tool_call_id"] for m in out[2:]] == ids
    assert nine_char_ids(MESSAGES) == out  # (the same every turn: the prefix stays cached)
    assert nine_char_ids(MESSAGES[:1]) == MESSAGES[:1]


def test_odd_ids_and_other_spellings_of_the_check():
    from lsd_local.chat.templates import render_chat

    odd = [{**CALLS[0], "id": "a\ud800b"}, {**CALLS[1], "id": 12345678}]
    out = nine_char_ids([{"role": "assistant", "content": None, "tool_calls": odd}])
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", c["id"]) for c in out[0]["tool_calls"])
    for check in ("tool_call['id']|length != 9", "(tool_call.id|length) != 9"):
        template = ("{%- for m in messages %}{%- for tool_call in m.tool_calls or [] %}"
                    "{%- if " + check + " %}{{- raise_exception('bad id') }}{%- endif %}"
                    "{{- tool_call.id }}{%- endfor %}{%- endfor %}")
        assert re.fullmatch(r"[0-9a-f]{9}Ab3De6Gh9", render_chat(template, MESSAGES[:2]))
