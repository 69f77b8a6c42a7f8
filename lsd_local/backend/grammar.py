"""GBNF grammars through llama.cpp's grammar sampler: compile, test one token, mask a row.

A `Grammar` is the parse state after the tokens it has accepted. The round loop asks
`allows(token)` (a one-candidate apply: cheap), `mask(row)` (every token: costly, done only
when needed), `accept(token)` for tokens it commits and `clone()` to look ahead along a draft.
llama.cpp aborts the process when a grammar accepts a token it forbids, so `accept` checks first.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import tempfile

import llama_cpp as ll
import numpy as np

from ..errors import GrammarError
from ..limits import check_grammar, check_schema
from ..utf8 import utf8_bytes
from .model import Model, _install_log_sink
from .trigger import TriggerGuard

GUARD_CHECKS = 64  # a waiting lazy grammar's mask: best tokens checked against its trigger
TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")], align=False)


class _Candidates:
    """A llama_token_data_array over a numpy buffer of `n` candidates (reused, no copies)."""

    def __init__(self, n: int) -> None:
        assert ctypes.sizeof(ll.llama_token_data) == TOKEN_DATA.itemsize
        self.data = np.zeros(n, TOKEN_DATA)
        self.data["id"] = np.arange(n, dtype=np.int32)
        self.array = ll.llama_token_data_array(
            data=self.data.ctypes.data_as(ctypes.POINTER(ll.llama_token_data)), size=n,
            selected=-1, sorted=False)
        self.pointer = ctypes.byref(self.array)


def _parse_error(text: str, printed: str, logged: list[str]) -> str:
    """llama.cpp prints '...error parsing grammar: <what> at <rest of the source>'; turn the rest
    into a line and column of `text`."""
    marker = "error parsing grammar: "
    if marker not in printed:
        return "; ".join(line for line in logged if line) or "llama.cpp rejected it"
    what = printed.split(marker, 1)[1]
    what = what[:len(what) - len(text) - 3] if what.endswith("\n\n" + text + "\n") else what
    for at in _occurrences(what, " at "):
        rest = what[at + 4:]
        if rest and text.endswith(rest):
            offset = len(text) - len(rest)
            line = text.count("\n", 0, offset) + 1
            column = offset - (text.rfind("\n", 0, offset) + 1) + 1
            snippet = rest.split("\n", 1)[0][:30]
            return f"line {line}, column {column}: {what[:at]} (at {snippet!r})"
    return what.strip().split("\n", 1)[0]


def _occurrences(text: str, needle: str) -> list[int]:
    found, start = [], text.find(needle)
    while start >= 0:
        found.append(start)
        start = text.find(needle, start + 1)
    return found


def _init_sampler(vocab, text: str, root: str, triggers: tuple[str, ...],
                  trigger_tokens: tuple[int, ...]):
    """llama.cpp's grammar sampler; lazy (free until a trigger) when triggers are given."""
    if not triggers and not trigger_tokens:
        return ll.llama_sampler_init_grammar(vocab, utf8_bytes(text), utf8_bytes(root))
    patterns = (ctypes.c_char_p * max(1, len(triggers)))(*[utf8_bytes(t) for t in triggers])
    tokens = (ll.llama_token * max(1, len(trigger_tokens)))(*trigger_tokens)
    return ll.llama_sampler_init_grammar_lazy_patterns(
        vocab, utf8_bytes(text), utf8_bytes(root), patterns, len(triggers), tokens,
        len(trigger_tokens))


def _init_capturing_stderr(vocab, text: str, root: str, triggers: tuple[str, ...] = (),
                           trigger_tokens: tuple[int, ...] = ()):
    """The grammar sampler, with what llama.cpp writes to fd 2 captured."""
    with tempfile.TemporaryFile() as capture:
        saved = os.dup(2)
        try:
            os.dup2(capture.fileno(), 2)
            sampler = _init_sampler(vocab, text, root, triggers, trigger_tokens)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        printed = capture.read().decode("utf-8", errors="replace")
    return sampler, printed


class Grammar:
    """Grammar state over one model's vocabulary; the model must outlive it."""

    def __init__(self, sampler_p, model: Model, scratch: tuple[_Candidates, _Candidates],
                 guard: TriggerGuard | None = None) -> None:
        self._sampler = sampler_p
        self._model = model
        self._one, self._all = scratch  # shared by clones: one thread uses them at a time
        self._guard = guard  # a lazy grammar's trigger, replayed (backend/trigger.py)

    @classmethod
    def compile(cls, model: Model, text: str, root: str = "root", source: str = "grammar",
                triggers: tuple[str, ...] = (), trigger_tokens: tuple[int, ...] = ()
                ) -> Grammar:
        """Parse GBNF `text`; GrammarError with the line and column of a syntax error. With
        `triggers` (regular expressions over the text generated so far, llama.cpp's trigger
        patterns) or `trigger_tokens`, the grammar is lazy: it allows everything until one
        matches, then applies from the match on (its root starts with what triggered it)."""
        if not text.strip():
            raise GrammarError(f"{source} is empty")
        check_grammar(text, source)  # what would crash llama.cpp's recursive parser
        sink = _install_log_sink(model.options.verbose)
        sink.recent.clear()
        sampler, printed = _init_capturing_stderr(model.vocab.handle, text, root, triggers,
                                                  trigger_tokens)
        if not sampler:
            reason = _parse_error(text, printed, list(sink.recent))
            raise GrammarError(f"invalid {source}: {reason}")
        grammar = cls(sampler, model, (_Candidates(1), _Candidates(model.n_vocab)))
        grammar.text, grammar.triggers = text, tuple(triggers)  # (what the forced drafter reads)
        grammar.root = root
        if triggers or trigger_tokens:
            grammar._guard = TriggerGuard(tuple(triggers), tuple(trigger_tokens),
                                          model.vocab.token_bytes_special,
                                          grammar._accepts_text)
        return grammar

    def _accepts_text(self, text: str) -> bool:
        """Whether this grammar, started afresh and eager, accepts `text` (fed as one token
        per byte; True when the vocabulary lacks a byte's token: nothing to check with)."""
        byte_tokens = self._model.vocab.byte_tokens()
        sampler = _init_sampler(self._model.vocab.handle, self.text, self.root, (), ())
        if not sampler:
            return True
        eager = Grammar(sampler, self._model, (self._one, self._all))
        try:
            for byte in utf8_bytes(text):
                token = byte_tokens.get(byte)
                if token is None:
                    return True
                if not eager.allows(token):
                    return False
                eager.accept(token, checked=True)
            return True
        finally:
            eager.close()

    def begin_in_reasoning(self) -> None:
        """The prompt opened a reasoning block: a lazy grammar's trigger is not to start
        before the block's end (the guard reads the generated text as inside it)."""
        if self._guard is not None:
            self._guard.inside_reasoning()

    def reasoning_markers(self, opener: str, closer: str, ends: tuple[str, ...] = ()) -> None:
        """The model family's reasoning markers (`<think>` unless told): no trigger starts a
        lazy grammar inside such a block, but one that starts with one of `ends` (what else
        ends the block: Ling 3's call opener)."""
        if self._guard is not None:
            self._guard.think = (utf8_bytes(opener), utf8_bytes(closer),
                                 tuple(utf8_bytes(end) for end in ends))

    def allows(self, token: int) -> bool:
        """Whether the grammar lets `token` come next (end-of-generation: only when complete;
        for a lazy grammar still waiting, not a token that would start it on text it rejects
        or inside a reasoning block)."""
        if self._guard is not None and self._guard.waiting and not self._guard.safe(token):
            return False
        one = self._one
        one.data["id"][0] = token
        one.data["logit"][0] = 0.0
        one.array.size = 1
        ll.llama_sampler_apply(self._sampler, one.pointer)
        return bool(one.data["logit"][0] != -math.inf)

    def accept(self, token: int, checked: bool = False) -> None:
        """Advance by a token the grammar allows (ValueError otherwise, instead of an abort).
        `checked`: the caller already knows (it asked allows() on this state, or took the
        token from a row constrained on it), so this state is not asked again."""
        if not checked and not self.allows(token):
            raise ValueError(f"token {token} is not allowed by the grammar here")
        if self._model.vocab.is_eog(token):  # llama.cpp aborts on EOG unless complete
            return
        if self._guard is not None and self._guard.waiting:
            if checked and not self._guard.safe(token):  # (a sampled row: never an abort)
                raise ValueError(f"token {token} would start the grammar on text it rejects")
            self._guard.advance(token)
        ll.llama_sampler_accept(self._sampler, token)

    def mask(self, row: np.ndarray) -> None:
        """Set every forbidden token's logit to -inf. row: float32[V], changed in place."""
        full = self._all
        full.data["logit"] = row
        full.array.size = len(full.data)
        full.array.sorted = False
        full.array.selected = -1
        ll.llama_sampler_apply(self._sampler, full.pointer)
        row[:] = full.data["logit"]
        if self._guard is not None and self._guard.waiting:  # (it allowed every token)
            for _ in range(GUARD_CHECKS):
                best = int(np.argmax(row))
                if row[best] == -math.inf or self._guard.safe(best):
                    break
                row[best] = -math.inf

    def clone(self) -> Grammar:
        """An independent copy of this state (sharing scratch buffers)."""
        twin = Grammar(ll.llama_sampler_clone(self._sampler), self._model,
                       (self._one, self._all),
                       self._guard.clone() if self._guard is not None else None)
        twin.text, twin.triggers, twin.root = self.text, self.triggers, self.root
        return twin

    def close(self) -> None:
        """Free the llama.cpp sampler (idempotent)."""
        if self._sampler:
            ll.llama_sampler_free(self._sampler)
            self._sampler = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit llama_cpp may be gone
            self.close()


# llama-cpp-python's converter lets JSON strings hold raw control characters, which JSON (and
# json.loads) forbids; llama.cpp's newer converter excludes them, as we do here.
_LOOSE_CHAR = 'char ::= [^"\\\\] |'
_JSON_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F] |'
# Its numbers' exponents had no leading zero (as integers have none), but JSON allows one,
# and Python writes small floats so (1e-07): up to 4 digits, any first.
_STRICT_EXPONENT = '([eE] [-+]? integral-part)?'
_JSON_EXPONENT = '([eE] [-+]? [0-9] ([0-9] ([0-9] ([0-9])?)?)?)?'


def _as_json_text(text: str) -> str:
    """A literal of llama-cpp-python's converter (JSON text of a key, const or enum, or one
    character) as a GBNF literal's inside should hold it: its backslashes escaped (it left
    them as they were: the key 'a "b"' made `"\\"a \\\\"b\\\\"\\""`, which llama.cpp
    refuses), and JSON's text with its characters as they are (json.dumps writes é as
    `\\u00e9`, which GBNF read as é and escaped would be six characters)."""
    if text[:1] in ('"', "{", "["):
        with contextlib.suppress(ValueError):
            text = json.dumps(json.loads(text), ensure_ascii=False)
    return text.replace("\\", "\\\\")


def schema_to_gbnf(schema: dict, source: str = "JSON schema") -> str:
    """GBNF text for a JSON schema (llama-cpp-python's converter); GrammarError when the schema
    uses something it cannot convert."""
    from llama_cpp.llama_grammar import SchemaConverter

    if not isinstance(schema, dict):
        raise GrammarError(f"invalid {source}: the top level must be an object, "
                           f"not {type(schema).__name__}")
    check_schema(schema, source)
    try:  # (llama_cpp.llama_grammar.json_schema_to_gbnf's steps, with literals escaped)
        converter = SchemaConverter(prop_order={}, allow_fetch=False, dotall=False,
                                    raw_pattern=False)
        quoted = converter._format_literal
        converter._format_literal = lambda text: quoted(_as_json_text(text))
        converter.visit(converter.resolve_refs(schema, "stdin"), "")
        text = converter.format_grammar()
    except Exception as exc:  # noqa: BLE001 - the converter signals with assorted exceptions
        raise GrammarError(f"cannot convert {source} to a grammar: {exc}") from None
    return text.replace(_LOOSE_CHAR, _JSON_CHAR).replace(_STRICT_EXPONENT, _JSON_EXPONENT)
