"""Text to bytes for llama.cpp and tokenizers, whatever the text holds (a leaf: it imports
nothing of lsd's, so every layer may use it)."""

from __future__ import annotations


def utf8_bytes(text: str) -> bytes:
    """Valid UTF-8 for any str: lone surrogates (undecodable command-line bytes, JSON's
    '\\ud800') become U+FFFD (one per undecodable byte) instead of a UnicodeEncodeError, so
    no user text can crash a tokenizer or the grammar parser."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        pass
    try:  # bytes Python could not decode (argv, file names) come back as those bytes
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # other lone surrogates
        raw = text.encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "replace").encode("utf-8")
