"""Renames the answer makes while it copies its prompt, carried into the copies proposed
after. Asked to rename a function (`pstdev` -> `pstdev_v2`) or a variable, a model re-emits
the code with the new name at every place the old one stood; prompt lookup proposes the
prompt's text, so each later occurrence (a recursive call, the name in an error message)
breaks a copy that would otherwise hold, and on a CPU where a long block costs ~25 steps a
broken block of 64 loses more than the copy gained (docs/drafting.md, "Renames").

A rename is read where the answer takes up a copy of its prompt again: lookup's match runs
back to where the two texts part, and when what stands right before it is one identifier in
the prompt and another in the answer, with the same text before both, the name was
replaced (not a type hint added, nor a keyword or a name the code already has put there).
From then on, lookup proposals found in the prompt spell the new name where the old one
stands as a whole word (not an attribute of another object, not a word in prose). A rename
the answer does not keep (it writes the old name again where a rename would reach it) is
dropped. Verification decides as for any draft: a wrong rename costs a rejected token.
Renames are kept per answer (begin).
"""

from __future__ import annotations

import functools
import keyword
import re

import numpy as np

from ..config import RUN_CAP

# the text before a new name that must equal the prompt's before the old one (bytes)
CONFIRM_BYTES = 4
MAX_NAME = 64  # longest identifier read (bytes)
LEFT_TOKENS = 24  # tokens read before a copied stretch (a name and what precedes it)
IDENT = rb"[A-Za-z0-9_]"  # a byte of an identifier (ASCII names)
IDENT_HEAD = re.compile(IDENT + rb"*")
IDENT_TAIL = re.compile(IDENT + rb"*\Z")
MATCH_TOKENS = 4  # tokens read of the copied stretch (a name that goes on into it)
# bytes of the committed text read before a proposal or kept between checks: a name cut
# there, and what tells whether it is a whole word or an attribute (`self.`)
KEEP_BYTES = MAX_NAME + 8
END_TOKENS = 24  # tokens read at a time for that (most spell 2-6 bytes)
CODE_WINDOW = 2048  # tokens read each side of a rename's place for its code block
FENCE = b"```"
# words that are no names: a keyword or literal changed (`True` -> `False`, `and` -> `or`)
# is an edit of that place
NOT_NAMES = frozenset(w.encode() for w in (*keyword.kwlist, *keyword.softkwlist, "self",
                                           "cls", "this", "true", "false", "null", "nil"))


def find_rename(source_left: bytes, answer_left: bytes, match: bytes
                ) -> tuple[bytes, bytes] | None:
    """Where the answer took up a copy of its prompt again: the prompt's text before the
    copied stretch (`source_left`), the answer's before it (`answer_left`) and the
    stretch's start (`match`, the same in both). (old name, new name) when the two differ
    by one identifier that ends where the stretch starts (or goes on into it alike) and
    the text before it is the same for CONFIRM_BYTES; else None."""
    lead = IDENT_HEAD.match(match).group()
    if len(lead) == len(match):  # (the name may go on past what was read)
        return None
    old_head = IDENT_TAIL.search(source_left[-MAX_NAME:]).group()
    new_head = IDENT_TAIL.search(answer_left[-MAX_NAME:]).group()
    old, new = old_head + lead, new_head + lead
    if not old_head or not new_head or old == new or len(new) >= MAX_NAME \
            or len(old) >= MAX_NAME or old[:1].isdigit() or new[:1].isdigit() \
            or old in NOT_NAMES or new in NOT_NAMES:
        return None
    before_old = source_left[:len(source_left) - len(old_head)]
    before_new = answer_left[:len(answer_left) - len(new_head)]
    if len(before_old) < CONFIRM_BYTES or len(before_new) < CONFIRM_BYTES or \
            before_old[-CONFIRM_BYTES:] != before_new[-CONFIRM_BYTES:]:
        return None
    return old, new


@functools.lru_cache(maxsize=256)
def whole_word(name: bytes) -> re.Pattern:
    """The pattern of `name` standing as a whole identifier."""
    return re.compile(rb"(?<!" + IDENT + rb")" + re.escape(name) + rb"(?!" + IDENT + rb")")


def rename_spans(tail: bytes, text: bytes, renames: dict[bytes, bytes]
                 ) -> list[tuple[int, int, bytes]]:
    """Where `text` (what a proposal would add after `tail`, the committed text's end)
    holds an old name as a whole word: (start, end, replacement) in text's bytes, in order,
    not overlapping. A name begun in the tail (or written whole there, text going on with
    another character) is finished as the new one where what was written of it is the new
    one's start too; one at text's very end (it may go on), at the tail's first byte (a
    token boundary inside a longer identifier, maybe), an attribute of another object
    (`ut.untokenize` where the function `untokenize` was renamed) or a word in prose (`'No
    translation file found'` where `translation` was renamed) is left."""
    whole = tail + text
    spans: list[tuple[int, int, bytes]] = []
    for old, new in renames.items():
        for match in whole_word(old).finditer(whole):
            start, end = match.start(), match.end()
            written = len(tail) - start
            if end < len(tail) or end >= len(whole) or (start == 0 and tail) \
                    or not stands_for_name(whole, start, end):
                continue
            if written > 0 and old[:written] != new[:written]:
                continue
            spans.append((max(start - len(tail), 0), end - len(tail), new[max(written, 0):]))
    spans.sort()
    kept: list[tuple[int, int, bytes]] = []
    for span in spans:
        if not kept or span[0] >= kept[-1][1]:
            kept.append(span)
    return kept


def stands_for_name(text: bytes, start: int, end: int) -> bool:
    """Whether a whole-word old name at text[start:end] is one a rename reaches: not an
    attribute of another object, not a word in prose."""
    return not _of_another_object(text, start) and not _in_prose(text, start, end)


def _of_another_object(text: bytes, start: int) -> bool:
    """Whether the name at text[start:] is an attribute (after a dot) of anything but
    `self` or `cls`: another namespace than the one the rename was made in."""
    if start == 0 or text[start - 1:start] != b".":
        return False
    owner = IDENT_TAIL.search(text[max(start - 1 - MAX_NAME, 0):start - 1]).group()
    return owner not in (b"self", b"cls")


def _in_prose(text: bytes, start: int, end: int) -> bool:
    """Whether the name at text[start:end] stands between a space and another word, as
    in a comment or a message, where a function's name may be just a word. (In code a
    name is mostly followed by punctuation; `x in`, `y if` lose the rename, not more.)"""
    return text[start - 1:start] == b" " and text[end:end + 1] == b" " and \
        (end + 1 == len(text) or text[end + 1:end + 2].isalpha())


class RenameWatch:
    """Renames learned in the answer being written, applied to lookup proposals found in
    its prompt. Each call is given `codec`: crossvocab.TextCodec of the target (piece,
    text, exact)."""

    def __init__(self) -> None:
        self.renames: dict[bytes, bytes] = {}
        self._dropping: dict[bytes, re.Pattern] = {}
        self._refused: set[tuple[bytes, bytes]] = set()  # (names the code around has)
        # where the last copied stretch read starts, in the answer and in the prompt (a
        # longer match may find another place in the prompt for the same stretch)
        self._read_from = (-1, -1)
        self._seen = 0  # history tokens the kept renames were checked against
        self._unchecked = b""  # the end of the text checked, read again with what follows
        # old name -> (first token, last token) of each of its whole-word places in the
        # prompt, read once: a proposal found in the prompt away from them is left as is
        self._places: dict[bytes, list[tuple[int, int]]] = {}

    def begin(self) -> None:
        """A new answer: nothing learned."""
        self.__init__()

    def observe(self, history: np.ndarray, n_prompt: int, origin: int, run: int,
                codec) -> None:
        """A proposal was found in the prompt at `origin` after a copied stretch of `run`
        tokens (history: int32[n]): where that stretch starts in the answer, the text
        before it may be the prompt's with a name changed."""
        self._drop_unkept(history, n_prompt, codec)
        at, source = len(history) - run, origin - run
        # (a run at its cap did not reach where the stretch starts)
        if at <= n_prompt or (at, source) == self._read_from or run >= RUN_CAP \
                or not 0 < source < n_prompt:
            return
        self._read_from = (at, source)
        found = find_rename(codec.text(history[max(source - LEFT_TOKENS, 0):source]),
                            codec.text(history[max(at - LEFT_TOKENS, n_prompt):at]),
                            codec.text(history[at:at + MATCH_TOKENS]))
        if found is None or found[0] in self.renames or found in self._refused:
            return
        if self._in_code_around(found[1], history, source, n_prompt, codec):
            self._refused.add(found)
            return
        old, new = found
        self.renames[old] = new
        self._dropping[old] = whole_word(old)
        self._seen, self._unchecked = at, b""  # (what the answer wrote before is left)

    @staticmethod
    def _in_code_around(name: bytes, history: np.ndarray, source: int, n_prompt: int,
                        codec) -> bool:
        """Whether `name` stands as a whole word in the prompt's code around `source` (its
        fenced block within CODE_WINDOW tokens each side; all of them where no fence is
        there): a name the code already had (a variable) written where the prompt has
        another is an edit of that place, not a rename. (A request naming the new name
        outside the block does not count.)"""
        start = max(source - CODE_WINDOW, 0)
        before = codec.text(history[start:source])
        after = codec.text(history[source:min(source + CODE_WINDOW, n_prompt)])
        fence = before.rfind(FENCE)
        code = before[fence + len(FENCE):] if fence >= 0 else before
        fence = after.find(FENCE)
        code += after[:fence] if fence >= 0 else after
        return whole_word(name).search(code) is not None

    def _near_a_place(self, history: np.ndarray, origin: int, size: int, n_prompt: int,
                      codec) -> bool:
        """Whether a proposal of the prompt's tokens [origin, origin + size) touches a place
        of an old name (or the token before it does: a name finished there)."""
        for old in self.renames:
            places = self._places.get(old)
            if places is None:
                places = self._places[old] = _places(old, history[:n_prompt], codec)
            if any(last >= origin - 1 and first < origin + size for first, last in places):
                return True
        return False

    def _drop_unkept(self, history: np.ndarray, n_prompt: int, codec) -> None:
        """Drop a rename whose old name the answer wrote again as a whole word where a
        rename would reach it, read since the rename was read: each time what was
        committed since the last call, after the end of the text read then (a name may
        have been cut there, and it tells a whole word and an attribute)."""
        if len(history) < self._seen or not self.renames:  # (a rewind: read on from here)
            self._seen, self._unchecked = len(history), b""
            return
        if len(history) == self._seen:
            return
        text = self._unchecked + codec.text(history[max(self._seen, n_prompt):])
        for old in [o for o, pattern in self._dropping.items()
                    if any(m.end() < len(text) and stands_for_name(text, m.start(), m.end())
                           for m in pattern.finditer(text))]:
            del self.renames[old], self._dropping[old]
        self._seen, self._unchecked = len(history), text[-KEEP_BYTES:]

    def apply(self, history: np.ndarray, tokens: np.ndarray, codec, origin: int = -1,
              n_prompt: int = 0) -> tuple[np.ndarray, int]:
        """The proposal `tokens` (int32[m], found in the prompt: history[origin:], where
        origin >= 0 is given) with the renames spelled in, at most m tokens (cut before a
        renamed stretch its tokenizer cannot spell), and the index of its first token a
        rename changed (-1: none)."""
        if not self.renames or not len(tokens):
            return tokens, -1
        if 0 <= origin < n_prompt and not self._near_a_place(history, origin, len(tokens),
                                                             n_prompt, codec):
            return tokens, -1  # (the common case: a few µs, nothing read)
        pieces = list(map(codec.piece, tokens.tolist()))
        text = b"".join(pieces)
        tail = _text_end(history, KEEP_BYTES, codec)
        whole = tail + text
        if not any(old in whole for old in self.renames):  # (the common case)
            return tokens, -1
        spans = rename_spans(tail, text, self.renames)
        if not spans:
            return tokens, -1
        ends = np.cumsum([len(p) for p in pieces])  # int64[m]: each token's end byte
        out: list[int] = []
        done = 0  # tokens consumed
        for start, end, new in spans:
            first = int(np.searchsorted(ends, start, side="right"))  # token holding start
            last = max(int(np.searchsorted(ends, end - 1, side="right")), first)  # holds end-1
            if first < done:
                continue
            begin = int(ends[first - 1]) if first else 0
            stretch = b"".join(pieces[first:last + 1])
            spelled = codec.exact(stretch[:start - begin] + new + stretch[end - begin:])
            out += tokens[done:first].tolist()
            if spelled is None:
                break
            out += spelled
            done = last + 1
        else:
            out += tokens[done:].tolist()
        renamed = np.asarray(out[:len(tokens)], np.int32)
        differ = np.flatnonzero(renamed != tokens[:len(renamed)])
        return renamed, int(differ[0]) if len(differ) else -1


def _places(name: bytes, prompt: np.ndarray, codec) -> list[tuple[int, int]]:
    """(first token, last token) of every whole-word place of `name` in the text of
    `prompt` (int32[n])."""
    pieces = list(map(codec.piece, prompt.tolist()))
    ends = np.cumsum([len(p) for p in pieces])  # int64[n]: each token's end byte
    found = [(m.start(), m.end()) for m in whole_word(name).finditer(b"".join(pieces))]
    starts = np.searchsorted(ends, [a for a, _ in found], side="right")
    lasts = np.searchsorted(ends, [b - 1 for _, b in found], side="right")
    return list(zip(starts.tolist(), lasts.tolist(), strict=True))


def _text_end(history: np.ndarray, n_bytes: int, codec) -> bytes:
    """The text of the history's last tokens, at least n_bytes of it where there are
    (history: int32[n]; read in steps of END_TOKENS tokens)."""
    end = len(history)
    text = b""
    while len(text) < n_bytes and end > 0:
        start = max(end - END_TOKENS, 0)
        text = codec.text(history[start:end]) + text
        end = start
    return text
