"""A model's vocabulary: text <-> token ids and its special tokens (llama_vocab), apart from
the context that evaluates them (model.py), as llama-cpp-python's _internals splits them."""

from __future__ import annotations

import ctypes
import hashlib

import llama_cpp as ll

from ..errors import IncompatibleModelsError
from ..utf8 import utf8_bytes


class Vocab:
    """Tokenize and detokenize with one model's vocabulary. `vocab_p` (a llama_vocab pointer)
    belongs to its llama_model: a Vocab lives no longer than the Model that made it."""

    def __init__(self, vocab_p) -> None:
        self.handle = vocab_p  # for llama.cpp calls that take the vocabulary (grammars)
        self.n_tokens: int = ll.llama_vocab_n_tokens(vocab_p)
        self._piece_cache: dict[int, bytes] = {}
        self._special_cache: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}
        self._byte_tokens: dict[int, int] | None = None

    def tokenize(self, text: str, add_special: bool = True,
                 parse_special: bool = True) -> list[int]:
        """Text -> token ids; `parse_special` turns '<|im_start|>' etc. into their ids."""
        return self.tokenize_bytes(utf8_bytes(text), add_special, parse_special)

    def token_bytes(self, token: int) -> bytes:
        """The raw bytes a token stands for (control tokens render as empty)."""
        piece = self._piece_cache.get(token)
        if piece is None:
            piece = self._piece_cache[token] = self._piece(token, False)
        return piece

    def _piece(self, token: int, special: bool) -> bytes:
        """llama.cpp's piece of a token, in a buffer of its own (ctypes lets go of the GIL:
        generations side by side may ask from several threads at once)."""
        buf = ctypes.create_string_buffer(256)
        n = ll.llama_token_to_piece(self.handle, token, buf, 256, 0, special)
        return buf.raw[:max(n, 0)]

    def token_bytes_special(self, token: int) -> bytes:
        """Like token_bytes, but control tokens render as their text ('<|im_start|>'), as
        llama.cpp's grammars see them, and so that another tokenizer can read the same
        conversation (cross-vocabulary drafting)."""
        piece = self._special_cache.get(token)
        if piece is None:
            piece = self._special_cache[token] = self._piece(token, True)
        return piece

    def showing(self, markers: tuple[str, ...]):
        """token id -> bytes (token_bytes), except that a control token which spells one of
        `markers`, or a piece of one (Gemma 4's `<|channel>` of "<|channel>thought"), shows
        as its text (what an output parser must read: llama.cpp's "preserved tokens"; an
        end-of-generation token still shows nothing)."""
        shown = set()
        for marker in markers:
            shown.update(token for token in self.tokenize(marker, add_special=False)
                         if self.is_control(token) and not self.is_eog(token))
        if not shown:
            return self.token_bytes
        return lambda token: self.token_bytes_special(token) if token in shown \
            else self.token_bytes(token)

    def tokenize_bytes(self, data: bytes, add_special: bool = False,
                       parse_special: bool = True) -> list[int]:
        """UTF-8 bytes -> token ids (a cut multi-byte character is tokenized as raw bytes)."""
        cap = len(data) + 8
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(self.handle, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (ll.llama_token * cap)()
            n = ll.llama_tokenize(self.handle, data, len(data), buf, cap, add_special,
                                  parse_special)
        return list(buf[:n])

    def fingerprint(self) -> str:
        """A short key for this vocabulary (what files that hold token ids depend on): its
        size and a hash of a spread of its tokens' texts, the added ones at the end too."""
        n = self.n_tokens
        sample = sorted(set(range(0, n, max(1, n // 4096))) | set(range(max(0, n - 512), n)))
        digest = hashlib.sha256(str(n).encode())
        for token in sample:
            digest.update(self.token_text(token) + b"\0")
        return digest.hexdigest()[:24]

    def is_added(self, token: int) -> bool:
        """A token added to the vocabulary (control or user-defined: "<tool_call>"), which the
        tokenizer matches as a whole where the model may have learned to spell it out."""
        attr = ll.llama_vocab_get_attr(self.handle, token)
        return bool(attr & (ll.LLAMA_TOKEN_ATTR_CONTROL | ll.LLAMA_TOKEN_ATTR_USER_DEFINED))

    def byte_tokens(self) -> dict[int, int]:
        """byte value -> a token whose text is that one byte (byte-level BPE's base tokens,
        SentencePiece's <0xXX>): any text spelled one byte at a time. Found once."""
        if self._byte_tokens is None:
            found: dict[int, int] = {}
            for token in range(self.n_tokens):
                piece = self.token_bytes(token)
                if len(piece) == 1 and piece[0] not in found:
                    found[piece[0]] = token
            self._byte_tokens = found
        return self._byte_tokens

    def is_control(self, token: int) -> bool:
        """A control token ('<|im_end|>'; also <unk>): what only special-token parsing turns
        text into (user text is tokenized without it, chat/literal.py)."""
        attr = ll.llama_vocab_get_attr(self.handle, token)
        return bool(attr & (ll.LLAMA_TOKEN_ATTR_CONTROL | ll.LLAMA_TOKEN_ATTR_UNKNOWN))

    def token_text(self, token: int) -> bytes:
        """The vocabulary's stored text for a token (used for compatibility checks)."""
        return ll.llama_vocab_get_text(self.handle, token) or b""

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, EOT, <|im_end|>, ...)."""
        known = self._eog.get(token)
        if known is None:  # a ctypes call once per token id, a dict lookup afterwards
            known = self._eog[token] = bool(ll.llama_vocab_is_eog(self.handle, token))
        return known

    @property
    def bos_token(self) -> int:
        return ll.llama_vocab_bos(self.handle)

    @property
    def eos_token(self) -> int:
        return ll.llama_vocab_eos(self.handle)

    @property
    def add_bos(self) -> bool:
        return bool(ll.llama_vocab_get_add_bos(self.handle))


# llama.cpp's own speculative examples accept vocabularies that differ by a few padding ids at
# the end and skip the first few ids (special tokens that vary between conversions).
VOCAB_MAX_SIZE_DIFFERENCE = 128
VOCAB_CHECK_START_ID = 5


def vocab_compatible(target, draft) -> bool:
    """Whether `draft` tokenizes text exactly like `target` (backend Models; then drafts are
    token ids, else the engine drafts through text, see drafters/crossvocab.py)."""
    try:
        check_vocab_compatible(target, draft)
    except IncompatibleModelsError:
        return False
    return True


def check_vocab_compatible(target, draft) -> None:
    """Raise IncompatibleModelsError unless `draft` tokenizes text exactly like `target`."""
    if abs(target.n_vocab - draft.n_vocab) > VOCAB_MAX_SIZE_DIFFERENCE:
        raise IncompatibleModelsError(
            f"draft {draft.path.name} has {draft.n_vocab} tokens, target {target.path.name} has "
            f"{target.n_vocab}: different vocabularies (use prompt lookup: drafter='lookup')")
    mine, theirs = target.vocab, draft.vocab
    if mine.add_bos != theirs.add_bos or (mine.add_bos and mine.bos_token != theirs.bos_token):
        raise IncompatibleModelsError(
            f"draft {draft.path.name} and target {target.path.name} use different BOS tokens")
    for token in range(VOCAB_CHECK_START_ID, min(target.n_vocab, draft.n_vocab)):
        if mine.token_text(token) != theirs.token_text(token):
            raise IncompatibleModelsError(
                f"draft {draft.path.name} and target {target.path.name} differ at token {token} "
                f"({theirs.token_text(token)!r} vs {mine.token_text(token)!r}): different "
                "vocabularies (use prompt lookup: drafter='lookup')")
