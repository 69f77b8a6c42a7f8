"""Repetition penalties and logit biases on a verified block, as llama.cpp's samplers apply
them (logit bias, then its penalties sampler), with the counts each row would see.

Row j of a block predicts the token after the committed tokens plus draft[:j], so its
penalties count the last `repeat_last_n` tokens of exactly that sequence (prompt, answer and
the draft tokens before it). Plain decoding sees the same sequence for the same position:
strict speculation with penalties commits what plain decoding with them would. Pure numpy;
`penalize_reference` is the obvious per-row version the tests compare with.
"""

from __future__ import annotations

import numpy as np

from ..config import PenaltySettings


def apply_bias(logits: np.ndarray, settings: PenaltySettings) -> None:
    """Add the logit biases to every row (float32[rows, V], in place); -inf bans a token."""
    if settings.logit_bias:
        ids = np.fromiter((token for token, _ in settings.logit_bias), np.int64)
        biases = np.fromiter((bias for _, bias in settings.logit_bias), np.float32)
        logits[:, ids] += biases


def penalize_row(row: np.ndarray, window: np.ndarray, settings: PenaltySettings) -> None:
    """llama.cpp's penalties on one row (float32[V], in place) for the tokens of `window`
    (int32[n]): a token seen c times has its logit divided by repeat_penalty (multiplied when
    it is not positive), then lowered by c * frequency_penalty + presence_penalty."""
    if not len(window):
        return
    tokens, counts = np.unique(window, return_counts=True)
    values = row[tokens]
    repeat = np.float32(settings.repeat_penalty)
    values = np.where(values <= 0, values * repeat, values / repeat)
    values -= (counts.astype(np.float32) * np.float32(settings.frequency_penalty)
               + np.float32(settings.presence_penalty))
    row[tokens] = values


def penalize_block(logits: np.ndarray, history: np.ndarray, draft: np.ndarray,
                   settings: PenaltySettings) -> None:
    """Biases, then penalties, on a block (in place). logits: float32[K+1, V]; history:
    int32[n], the committed tokens; draft: int32[>= K] (the first K are the block's)."""
    apply_bias(logits, settings)
    if not settings.penalizes:
        return
    n_rows = logits.shape[0]
    last_n = settings.repeat_last_n
    tail = history if last_n < 0 else history[max(0, len(history) - last_n):]
    sequence = np.concatenate([tail, draft[:n_rows - 1]]).astype(np.int32, copy=False)
    end = len(tail)  # row 0 sees the sequence up to here
    for j in range(n_rows):
        start = 0 if last_n < 0 else max(0, end + j - last_n)
        penalize_row(logits[j], sequence[start:end + j], settings)


def penalize_reference(logits: np.ndarray, history: np.ndarray, draft: np.ndarray,
                       settings: PenaltySettings) -> None:
    """Obvious version (tests): every row's whole sequence, its window, a count per token,
    one token at a time. Same arguments as penalize_block."""
    for j in range(logits.shape[0]):
        row = logits[j]
        for token, bias in settings.logit_bias:
            row[token] = np.float32(row[token] + np.float32(bias))
        if not settings.penalizes:
            continue
        sequence = [int(t) for t in history] + [int(t) for t in draft[:j]]
        last_n = settings.repeat_last_n
        window = sequence if last_n < 0 else sequence[len(sequence) - last_n:] if last_n else []
        for token in sorted(set(window)):
            count = window.count(token)
            value = row[token]
            value = value * np.float32(settings.repeat_penalty) if value <= 0 \
                else value / np.float32(settings.repeat_penalty)
            value -= (np.float32(count) * np.float32(settings.frequency_penalty)
                      + np.float32(settings.presence_penalty))
            row[token] = value


def logit_bias_pairs(spec: object, vocab, more: tuple[tuple[int, float], ...] = ()
                     ) -> tuple[tuple[int, float], ...]:
    """(token id, bias) pairs from what clients send (ParameterError names logit_bias):
    OpenAI's {"token id": bias} (ids as strings or ints), or llama-server's
    [[token id or text, bias or false], ...] (a text biases each of its tokens; false bans),
    plus `more` pairs; a token given twice gets the sum. `vocab`: anything with n_tokens and
    tokenize()."""
    from ..errors import ParameterError

    summed: dict[int, float] = dict(more)
    if spec is None:
        return tuple(summed.items())
    items = spec.items() if isinstance(spec, dict) else spec
    try:
        for key, bias in items:
            value = -np.inf if bias is False else float(bias)
            ids = _bias_ids(key, vocab)
            for token in ids:
                summed[token] = summed.get(token, 0.0) + value
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"invalid logit_bias: {exc}", param="logit_bias") from None
    return tuple(summed.items())


def _bias_ids(key: object, vocab) -> list[int]:
    if isinstance(key, str) and not key.strip().lstrip("-").isdigit():
        return vocab.tokenize(key, add_special=False, parse_special=False)
    token = int(key)
    if not 0 <= token < vocab.n_tokens:
        raise ValueError(f"token id {token} is outside the vocabulary (0..{vocab.n_tokens - 1})")
    return [token]
