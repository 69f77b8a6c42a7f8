"""ForcedDraft (drafters/forced.py) over a small fake vocabulary: the forced text's tokens,
whitespace habits learned from the committed text, added tokens, lazy triggers, split
UTF-8; and the round loop putting forced tokens first with a drafter going on after them."""

from __future__ import annotations

import numpy as np
from fakes import FakeTarget, ScriptedDrafter, fake_generation

from lsd_local.config import RuleConfig
from lsd_local.drafters.forced import Forced, ForcedDraft
from lsd_local.loop import LoopSettings
from lsd_local.stats import GenerationStats
from lsd_local.text import TextAssembler
from lsd_local.verify.verifier import Verifier

TOOL_GRAMMAR = ('root ::= "<tool_call>" ws "{\\"name\\": \\"" ("get_weather" | "get_time") '
                '"\\", \\"x\\": " [0-9]+ "}" ws "</tool_call>"\nws ::= [ \\n]?')


class ByteVocab:
    """Bytes are tokens 0..255; a few merges and one added token, longest match first."""

    MERGES = {b'{"': 300, b'":': 301, b' "': 302, b"get": 303, b"_weather": 304}
    ADDED = {b"<tool_call>": 256}

    def __init__(self) -> None:
        self.pieces = {**{bytes([b]): b for b in range(256)}, **self.MERGES, **self.ADDED}
        self.by_id = {token: piece for piece, token in self.pieces.items()}
        self.longest = max(map(len, self.pieces))

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        data, out, at = text.encode(), [], 0
        while at < len(data):
            for size in range(min(self.longest, len(data) - at), 0, -1):
                token = self.pieces.get(data[at:at + size])
                if token is not None:
                    out.append(token)
                    at += size
                    break
        return out

    def tokenize_bytes(self, data: bytes, add_special: bool = False,
                       parse_special: bool = True) -> list[int]:
        return self.tokenize(data.decode(errors="surrogateescape"))

    def token_bytes(self, token: int) -> bytes:
        return self.by_id[token]

    token_bytes_special = token_bytes

    def is_added(self, token: int) -> bool:
        return token in self.ADDED.values()

    def is_eog(self, token: int) -> bool:  # (no token ends a generation here)
        return False


def text_of(vocab: ByteVocab, tokens) -> str:
    return b"".join(vocab.token_bytes(int(t)) for t in tokens).decode()


def test_forced_text_is_tokenized_up_to_an_added_token_the_model_has_not_written():
    vocab = ByteVocab()
    forced = ForcedDraft(TOOL_GRAMMAR, (), vocab)
    assert len(forced.propose(8)) == 0  # "<tool_call>": one token, or spelled out?
    forced.advance(vocab.tokenize("<"))  # the model spells it out
    assert text_of(vocab, forced.propose(32)) == 'tool_call>\n{"name'  # (16 tokens: the cap)
    again = ForcedDraft(TOOL_GRAMMAR, (), vocab)
    again.advance([256])  # the model wrote the added token: from now on it is drafted
    assert text_of(vocab, again.propose(32)) == '\n{"name": "get_'


def test_k_limits_the_tokens_and_the_state_follows_the_commits():
    vocab = ByteVocab()
    forced = ForcedDraft(TOOL_GRAMMAR, (), vocab)
    forced.advance(vocab.tokenize("<tool_call>"[:1]) + vocab.tokenize("tool_call>\n"))
    tokens = forced.propose(3)
    assert list(tokens) == [300, ord("n"), ord("a")] and tokens.dtype == np.int32
    forced.advance(vocab.tokenize('{"name": "get_weather'))
    assert text_of(vocab, forced.propose(32)) == '", "x": '  # then a digit: not forced
    forced.advance(vocab.tokenize('", "x": 12'))
    assert len(forced.propose(32)) == 0  # another digit or "}"
    assert len(forced.propose(0)) == 0


def test_the_cap_grows_while_forced_tokens_are_kept_and_drops_after_a_miss():
    vocab = ByteVocab()
    grammar = 'root ::= "' + "ab" * 100 + '"'
    forced = ForcedDraft(grammar, (), vocab)
    first = forced.propose(100)
    assert len(first) == 16
    forced.advance(list(first))
    assert len(forced.propose(100)) == 32
    forced.advance(list(forced.propose(100)[:5]) + [ord("x")])  # the sixth was not forced
    assert forced.cap == 6
    short = ForcedDraft(grammar, (), vocab)
    short.propose(100)
    short.advance(vocab.tokenize("ab"))  # the answer ended there: no verdict on the rest
    assert short.cap == 16


def test_whitespace_habits_are_learned_from_the_committed_text():
    vocab = ByteVocab()
    grammar = 'root ::= "[" ws "1" ws "," ws "1" ws "," ws "1" ws "]"\nws ::= [ \\n]*'
    forced = ForcedDraft(grammar, (), vocab)
    assert text_of(vocab, forced.propose(32)) == "["  # then: a blank or not? unknown
    forced.advance(vocab.tokenize("[1"))
    assert text_of(vocab, forced.propose(32)) == ""  # blank after "1": unknown
    forced.advance(vocab.tokenize(" ,\n 1"))  # "1" -> " ", "," -> "\n "
    assert text_of(vocab, forced.propose(32)) == " ,\n 1 ]"
    forced.advance(vocab.tokenize(" ,\n"))  # the committed text stops inside a blank run
    assert text_of(vocab, forced.propose(32)) == " 1 ]"


def test_lazy_grammar_waits_for_its_trigger():
    vocab = ByteVocab()
    grammar = 'root ::= "<call>" "{\\"a\\": 1}"'
    forced = ForcedDraft(grammar, ("<call>",), vocab)
    forced.advance(vocab.tokenize("Let me call a tool. <ca"))
    assert len(forced.propose(16)) == 0
    forced.advance(vocab.tokenize("ll>"))
    assert text_of(vocab, forced.propose(16)) == '{"a": 1}'
    grouped = ForcedDraft('root ::= "{\\"a\\": 1}"', (r"^\s*(\{[\s\S]*)$",), vocab)
    grouped.advance(vocab.tokenize(" {"))  # the grammar starts at the group: "{"
    assert text_of(vocab, grouped.propose(16)) == '"a": 1}'


def test_split_utf8_and_unreadable_grammars():
    vocab = ByteVocab()
    forced = ForcedDraft('root ::= "é" "xyz"', (), vocab)
    data = "é".encode()
    forced.advance([data[0]])  # half a character: nothing moves yet
    forced.advance([data[1]])
    assert text_of(vocab, forced.propose(8)) == "xyz"
    unknown = ForcedDraft("root ::= x\nx ::= x", (), vocab)  # left recursive: not read
    unknown.advance(vocab.tokenize("abc"))
    assert len(unknown.propose(8)) == 0
    off_grammar = ForcedDraft('root ::= "ab"', (), vocab)
    off_grammar.advance(vocab.tokenize("x"))  # (llama.cpp's grammar decides; here: dead)
    assert len(off_grammar.propose(8)) == 0


class ListForced:
    """A forced-token source with a fixed answer (for the loop, which needs only
    propose/advance)."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens, self.advanced = list(tokens), []

    def propose(self, k: int) -> np.ndarray:
        return np.asarray(self.tokens[:k], np.int32)

    def propose_after(self, drafted, k: int) -> np.ndarray:
        return np.zeros(0, np.int32)

    def advance(self, tokens) -> None:
        self.advanced.extend(tokens)
        self.tokens = self.tokens[len(tokens):] if self.tokens[:len(tokens)] == list(
            tokens) else []


def run_fake(forced_tokens, drafter_factory, k: int = 6, n: int = 24):
    target = FakeTarget(n_ctx=256)
    prompt = [1, 5, 9]
    expected = target.greedy(prompt, n)
    forced = ListForced(forced_tokens(expected)) if forced_tokens else None
    drafter = drafter_factory(target)
    if forced is not None:  # (what Engine.generate does under a grammar)
        drafter = Forced(drafter, forced, len(prompt))
    settings = LoopSettings(n, k, None)
    gen = fake_generation(target, drafter, prompt, settings, Verifier(RuleConfig("strict"), None),
                          TextAssembler(lambda t: b"x", ()))
    events = list(gen)
    return expected, gen, events, forced


def test_loop_drafts_forced_tokens_first_and_output_is_unchanged():
    def forced_tokens(expected):
        return expected[:4]

    expected, gen, events, forced = run_fake(forced_tokens, lambda t: None)
    assert gen.tokens == expected
    assert events[0].n_forced == 4 and events[0].draft_source == "forced"
    assert events[0].tokens == tuple(expected[:5])  # four forced + the target's own
    assert forced.advanced[:5] == expected[:5]
    assert gen.stats.accepted_by_source == {"forced": 4}
    with_drafter = run_fake(forced_tokens, ScriptedDrafter)
    assert with_drafter[1].tokens == expected
    first = with_drafter[2][0]
    assert first.n_forced == 4 and first.n_drafted == 6 and first.draft_source == "scripted"
    assert with_drafter[1].stats.accepted_by_source["forced"] == 4


def test_wrong_forced_tokens_cost_a_rejection_not_the_answer():
    expected, gen, events, _ = run_fake(lambda e: [e[0], (e[1] + 1) % 7], ScriptedDrafter)
    assert gen.tokens == expected
    assert events[0].n_forced == 2 and events[0].n_accepted == 1


def test_stats_split_accepted_tokens_between_forced_and_drafter():
    stats = GenerationStats()
    events = run_fake(lambda e: e[:2], ScriptedDrafter)[2]
    for event in events:
        stats.add_round(event)
    assert sum(stats.accepted_by_source.values()) == stats.accepted
    assert sum(stats.drafted_by_source.values()) == stats.drafted
    assert "accepted tokens from" in stats.mix()


def test_the_grammar_text_after_a_drafted_value_is_drafted_too():
    vocab = ByteVocab()
    grammar = ('root ::= "{\\"a\\": \\"" [a-z]+ "\\", \\"b\\": \\"" [a-z]+ "\\"}"')
    forced = ForcedDraft(grammar, (), vocab)
    forced.advance(vocab.tokenize('{"a": "xy'))
    assert len(forced.propose(16)) == 0  # inside a string: not forced
    tail = forced.propose_after(np.asarray(vocab.tokenize('z"'), np.int32), 16)
    assert text_of(vocab, tail) == ', "b": "'
    assert len(forced.propose_after(np.asarray(vocab.tokenize("Z"), np.int32), 16)) == 0
    assert len(forced.propose_after(np.asarray([0xC3], np.int32), 16)) == 0  # half a char
    assert forced.cap == 16  # (a chained proposal is not what the cap is judged on)


class TailForced(ListForced):
    """Forces `head`; after any drafted tokens, forces `tail`."""

    def __init__(self, head, tail) -> None:
        super().__init__(head)
        self.tail = list(tail)

    def propose_after(self, drafted, k):
        return np.asarray(self.tail[:k], np.int32)


class SixDrafter(ScriptedDrafter):
    """Drafts at most six tokens and records what it is told of each verdict."""

    def __init__(self, target) -> None:
        super().__init__(target)
        self.verdicts = []

    def propose(self, history, k, sampler=None, rng=None, grammar=None):
        return super().propose(history, min(k, 6), sampler, rng, grammar)

    def accept(self, n_drafted, n_accept, verify_seconds, grew_logits=False):
        self.verdicts.append((n_drafted, n_accept, self.batch_tokens))


def test_loop_chains_grammar_tokens_after_the_drafters():
    target = FakeTarget(n_ctx=256)
    prompt = [1, 5, 9]
    expected = target.greedy(prompt, 24)
    for head in ([], expected[:2]):
        start = len(head)
        forced = TailForced(head, expected[start + 6:start + 9])  # after the drafter's six
        drafter = SixDrafter(target)
        settings = LoopSettings(24, 12, None)
        gen = fake_generation(target, Forced(drafter, forced, len(prompt)), prompt, settings,
                              Verifier(RuleConfig("strict"), None),
                              TextAssembler(lambda t: b"x", ()))
        events = list(gen)
        assert gen.tokens == expected
        first = events[0]
        assert (first.n_drafted, first.n_forced, first.n_forced_after) == (start + 9, start, 3)
        assert first.n_accepted == start + 9  # head, the drafter's, then the chained tail
        # the drafter hears its own six, the grammar's head and tail as others' tokens
        assert drafter.verdicts[0] == (6, 6, start + 3)
        stats = GenerationStats()
        stats.add_round(first)  # the tail is the grammar's, not the drafter's
        assert stats.accepted_by_source == {"forced": start + 3, "scripted": 6}


def test_grammars_this_reader_cannot_read_force_nothing_and_raise_nothing():
    for grammar in ('root ::= "\\U00110000"', 'root ::= "\\x', 'root ::= [a-'):
        forced = ForcedDraft(grammar, (), ByteVocab())
        assert len(forced.propose(8)) == 0
        assert len(forced.propose_after(np.zeros(0, np.int32), 8)) == 0


def test_the_chained_tail_obeys_the_cap_after_a_miss():
    vocab = ByteVocab()
    grammar = ('root ::= "{\\"a\\": \\"" [a-z]+ "\\", \\"bbbbbbbb\\": \\"" [a-z]+ "\\"}"')
    forced = ForcedDraft(grammar, (), vocab)
    forced.advance(vocab.tokenize('{"a": "xy'))
    whole = forced.propose_after(np.asarray(vocab.tokenize('z"'), np.int32), 16)
    assert text_of(vocab, whole) == ', "bbbbbbbb": "'
    forced.cap = 3  # as after a guess that missed at its third token
    tail = forced.propose_after(np.asarray(vocab.tokenize('z"'), np.int32), 16)
    assert len(tail) == 3 and list(tail) == list(whole[:3])


def test_the_inner_drafter_prices_a_forced_head_as_free_beside_other_requests():
    """Side by side, the wrapper is told the other requests' tokens and what they commit; the
    drafter inside hears both, with the forced head added to the decode's tokens as free
    ones (verified whatever it drafts), and afterwards what it had before (it is pooled)."""
    target = FakeTarget(n_ctx=256)
    prompt = [1, 5, 9]
    expected = target.greedy(prompt, 12)
    heard = []

    class Listening(SixDrafter):
        def propose(self, history, k, sampler=None, rng=None, grammar=None):
            heard.append((self.batch_tokens, self.batch_yield, self.batch_free))
            return super().propose(history, k, sampler, rng, grammar)
    inner = Listening(target)
    wrapper = Forced(inner, TailForced(expected[:2], ()), len(prompt))
    wrapper.batch_tokens, wrapper.batch_yield = 5, 2.5
    draft = wrapper.propose(np.asarray(prompt, np.int32), 8)
    assert len(draft) == 8 and draft.forced_head == 2
    assert heard == [(5 + 2, 2.5, 2)]
    assert (inner.batch_tokens, inner.batch_yield, inner.batch_free) == (0, 0.0, 0)
