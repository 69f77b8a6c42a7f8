"""Streaming text: characters split across tokens, stop strings held back and cut."""

from __future__ import annotations

from lsd_local.stats import Origin
from lsd_local.text import TextAssembler

PIECES = {1: "é".encode()[:1], 2: "é".encode()[1:], 3: b"a", 4: b"b", 5: b"STOP", 6: b"ST",
          7: b"OP", 8: "日".encode()[:2], 9: "日".encode()[2:]}


def stream(tokens, stop=(), origin=Origin.TARGET):
    asm = TextAssembler(PIECES.__getitem__, stop)
    chunks = []
    for i, t in enumerate(tokens):
        asm.add(t, origin)
        final = i == len(tokens) - 1
        if final:
            asm.finish()
        text, _ = asm.release(final=final)
        chunks.append(text)
        if asm.stopped:
            break
    return chunks, asm


def test_multibyte_character_released_only_when_complete():
    chunks, asm = stream([3, 1, 2, 8, 9, 4])
    assert chunks == ["a", "", "é", "", "日", "b"]
    assert "\ufffd" not in "".join(chunks)
    assert asm.released_text == "aé日b"


def test_incomplete_tail_becomes_replacement_at_the_end():
    chunks, _ = stream([3, 1])
    assert "".join(chunks) == "a\ufffd"


def test_stop_string_split_across_tokens_is_held_then_cut():
    chunks, asm = stream([3, 6, 7, 4], stop=["STOP"])
    assert chunks == ["a", "", ""]
    assert asm.stopped and asm.released_text == "a"


def test_partial_stop_prefix_is_released_when_it_does_not_complete():
    chunks, asm = stream([3, 6, 4], stop=["STOP"])
    assert chunks == ["a", "", "STb"]
    assert not asm.stopped


def test_spans_follow_token_origins():
    asm = TextAssembler(PIECES.__getitem__)
    asm.add(3, Origin.DRAFT_EXACT)
    asm.add(1, Origin.DRAFT_LOOSE)
    asm.add(2, Origin.DRAFT_LOOSE)
    asm.add(4, Origin.TARGET)
    text, spans = asm.release()
    assert text == "aéb"
    assert spans == (("a", Origin.DRAFT_EXACT), ("é", Origin.DRAFT_LOOSE),
                     ("b", Origin.TARGET))
