"""The lazy grammar's trigger guard (backend/trigger.py), on made-up token pieces: a call's
opener, as text or as its own token, starts no grammar inside a reasoning block, whether the
model opened the block or the prompt did."""

from __future__ import annotations

import pytest

from lsd_local.backend.trigger import TriggerGuard

PIECES = {1: b"<think>", 2: b"</think>", 3: b"<tool_call>", 4: b"hm ", 5: b"<tool_", 6: b"call>"}


def guard(opened_by_prompt: bool = False) -> TriggerGuard:
    made = TriggerGuard((r"(<tool_call>)",), (3,), PIECES.__getitem__, lambda text: True)
    if opened_by_prompt:
        made.inside_reasoning()
    return made


@pytest.mark.parametrize("opener", [[3], [5, 6]])  # its own token, or text over two
@pytest.mark.parametrize("before,reasoning", [
    ([], False), ([4], False), ([1, 4], True), ([1, 4, 2, 4], False), ([1, 2, 1], True)])
def test_an_opener_inside_a_reasoning_block_starts_no_grammar(opener, before, reasoning):
    g = guard()
    for token in before + opener[:-1]:
        assert g.safe(token)
        g.advance(token)
    assert g.safe(opener[-1]) is not reasoning


@pytest.mark.parametrize("opener", [[3], [5, 6]])
def test_a_block_the_prompt_opened_holds_until_its_close(opener):
    g = guard(opened_by_prompt=True)
    for token in [4] + opener[:-1]:
        g.advance(token)
    assert not g.safe(opener[-1])
    g = guard(opened_by_prompt=True)
    for token in [4, 2] + opener[:-1]:
        g.advance(token)
    assert g.safe(opener[-1])
