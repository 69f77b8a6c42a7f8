"""Row functions shared by the verifiers and drafters: target entropy, the top entries, and
the argmax with its share of the top logits (a draft model's stopping test). Plain argmaxes
are numpy's (SIMD: faster than any scalar loop over a row).

The numba kernels work on a float32[V] row in place (no copy, no materialized softmax) and
accumulate in float64, so that they and their numpy references agree to rounding. Call
sites call `top_entries`, `top_share` and `entropy`, which take the kernel once the kernels
are loaded and its reference until then (kernels/jit.py): the one dispatch style of the
package, as verify.fly/asd and drafters.lookup.lookup_any do for their kernels.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .jit import kernel_or


@njit(cache=True, nogil=True)
def _insert_descending(top, value):  # top: float[k], descending; value > top[-1]
    """Put value into its place in top, dropping the smallest."""
    pos = top.shape[0] - 1
    while pos > 0 and top[pos - 1] < value:
        top[pos] = top[pos - 1]
        pos -= 1
    top[pos] = value


@njit(cache=True, nogil=True)
def row_entropy(row, row_max, top_k, normalized):  # row: float32[V]
    """Entropy of softmax(row): over the top_k largest probabilities (unnormalized: the FLy
    reference code's and vLLM's h), or the full entropy divided by log V when `normalized`."""
    n = row.shape[0]
    m = np.float64(row_max)
    if not np.isfinite(m):  # NaN (np.argmax's answer for a row holding NaN), all -inf, +inf
        return np.nan
    total = 0.0
    weighted = 0.0  # sum of exp(l - m) * (l - m), for the full entropy
    top = np.full(top_k, -np.inf)  # the top_k largest logits, descending
    for i in range(n):
        shifted = np.float64(row[i]) - m
        e = np.exp(shifted)
        total += e
        if e > 0.0:  # 0 log 0 = 0: a -inf (grammar-masked) logit adds nothing, not NaN
            weighted += e * shifted
        if shifted > top[top_k - 1]:
            _insert_descending(top, shifted)
    log_total = np.log(total)
    if normalized:  # a one-token vocabulary has no uncertainty (and log V = 0)
        return (log_total - weighted / total) / np.log(n) if n > 1 else 0.0
    h = 0.0
    for t in range(top_k):
        if top[t] == -np.inf:
            break
        log_p = top[t] - log_total
        h -= np.exp(log_p) * log_p
    return h


def row_entropy_reference(row: np.ndarray, top_k: int, normalized: bool) -> float:
    """Obvious numpy version of row_entropy (tests; the fallback until kernels load).
    row: float32[V]."""
    logits = row.astype(np.float64)
    if np.isnan(logits).any() or not np.isfinite(logits.max()):
        return float("nan")
    log_p = logits - logits.max()
    log_p -= np.log(np.exp(log_p).sum())
    p = np.exp(log_p)
    with np.errstate(invalid="ignore"):
        plogp = np.where(p > 0, p * log_p, 0.0)  # 0 log 0 = 0 (masked tokens)
    if normalized:
        return float(-plogp.sum() / np.log(len(row))) if len(row) > 1 else 0.0
    return float(-plogp[row_top_reference(row, top_k)].sum())


@njit(cache=True, nogil=True)
def row_top(row, m):  # row: float32[V] -> int64[min(m, V)] indices, largest logit first
    """The m largest entries in one pass (insertion into a short sorted list); ties keep the
    lower index first, like a stable descending sort."""
    m = min(m, row.shape[0])
    top = np.full(m, -1, np.int64)
    values = np.full(m, -np.inf, np.float64)
    filled = 0
    for i in range(row.shape[0]):
        value = np.float64(row[i])
        if filled == m and value <= values[m - 1]:
            continue
        pos = filled if filled < m else m - 1
        while pos > 0 and values[pos - 1] < value:
            values[pos] = values[pos - 1]
            top[pos] = top[pos - 1]
            pos -= 1
        values[pos] = value
        top[pos] = i
        filled = min(filled + 1, m)
    return top


def row_top_reference(row: np.ndarray, m: int) -> np.ndarray:
    """numpy version of row_top: what a stable descending sort puts first, cut to m, without
    sorting the whole row (every entry at least the m-th largest is a candidate; candidates
    come in index order, so a stable sort of them orders ties by index). row: float32[V]."""
    values = row.astype(np.float64)
    m = min(m, len(values))
    if m <= 0:
        return np.zeros(0, np.int64)
    kth = np.partition(values, len(values) - m)[len(values) - m]
    candidates = np.flatnonzero(values >= kth) if not np.isnan(kth) else np.arange(len(values))
    order = np.argsort(-values[candidates], kind="stable")
    return candidates[order][:m].astype(np.int64)


SHARE_SLICES = 64  # row_top_share views a row as [64, V // 64]; see there


@njit(cache=True, nogil=True)
def _column_maxima(table):  # table: float32[S, C] -> float32[C], NaN ignored
    """The maximum of each column, slice by slice: every step is one contiguous, vectorized
    pass over C values (a max per contiguous block of the row is slower: each block ends
    in a horizontal reduction)."""
    maxima = np.full(table.shape[1], -np.inf, np.float32)
    for s in range(table.shape[0]):
        for c in range(table.shape[1]):
            x = table[s, c]
            if x > maxima[c]:  # False for NaN
                maxima[c] = x
    return maxima


@njit(cache=True, nogil=True)
def _kth_largest(values, k):  # values: float32[n], 1 <= k <= n
    """The k-th largest of values (insertion into a short sorted list; NaN ignored)."""
    top = np.full(k, -np.inf, np.float32)
    for v in values:
        if v > top[k - 1]:
            _insert_descending(top, v)
    return top[k - 1]


@njit(cache=True, nogil=True)
def _scan_top(row, start, stop, step, top, best, best_value):
    """Fold row[start:stop:step] into `top` (float64[k], descending) and the first maximum."""
    k = top.shape[0]
    for i in range(start, stop, step):
        v = np.float64(row[i])
        if v > best_value or (v == best_value and i < best):
            best, best_value = i, v
        if v > top[k - 1]:  # False for NaN
            _insert_descending(top, v)
    return best, best_value


@njit(cache=True, nogil=True)
def row_top_share(row, top_k):  # row: float32[V] (C-contiguous); top_k < 1 counts as 1
    """(argmax, its softmax probability over the top_k largest logits): llama.cpp's draft
    stopping test (its draft sampler keeps the top 10, then takes their softmax). NaN
    entries count as -inf; the argmax is the first maximum; the probability is NaN when the
    maximum is not finite.

    One vectorized pass: the row is viewed as S = 64 slices of C = V // 64 values, and the
    maximum of each column (the values at one offset in every slice) is taken. The k-th
    largest column maximum t is at most the row's k-th largest value (k columns hold a value
    of at least t), so only columns whose maximum reaches t, and the V % 64 values after the
    last slice, can hold a top value: ~k columns of 64, read exactly."""
    top_k = max(top_k, 1)
    n = row.shape[0]
    n_cols = n // SHARE_SLICES
    n_main = n_cols * SHARE_SLICES
    top = np.full(top_k, -np.inf, np.float64)
    best, best_value = 0, -np.inf
    if n_cols > 0:
        maxima = _column_maxima(row[:n_main].reshape(SHARE_SLICES, n_cols))
        t = _kth_largest(maxima, top_k) if n_cols >= top_k else -np.inf
        for c in range(n_cols):
            if maxima[c] >= t and maxima[c] > -np.inf:
                best, best_value = _scan_top(row, c, n_main, n_cols, top, best, best_value)
    best, best_value = _scan_top(row, n_main, n, 1, top, best, best_value)
    if not np.isfinite(best_value):
        return best, np.nan
    total = 0.0
    for v in top:
        total += np.exp(v - best_value)  # exp(-inf) = 0 for fewer than k finite values
    return best, 1.0 / total


def row_top_share_reference(row: np.ndarray, top_k: int) -> tuple[int, float]:
    """Obvious numpy version of row_top_share (tests; the fallback until kernels load).
    row: float32[V]."""
    top_k = max(top_k, 1)
    clean = np.where(np.isnan(row), -np.inf, row.astype(np.float64))
    best = int(np.argmax(clean))
    if not np.isfinite(clean[best]):
        return best, float("nan")
    top = np.partition(clean, len(clean) - min(top_k, len(clean)))[-top_k:]
    return best, float(1.0 / np.exp(top - clean[best]).sum())


def top_entries(row: np.ndarray, m: int) -> np.ndarray:
    """row_top, or its reference until the kernels are loaded. row: float32[V] ->
    int64[min(m, V)], largest first."""
    return kernel_or(row_top, row_top_reference)(row, m)


def top_share(row: np.ndarray, top_k: int) -> tuple[int, float]:
    """row_top_share, or its reference until the kernels are loaded. row: float32[V]
    (C-contiguous) -> (argmax, its probability over the top_k largest logits)."""
    best, share = kernel_or(row_top_share, row_top_share_reference)(row, top_k)
    return int(best), float(share)


def entropy(row: np.ndarray, top_k: int, normalized: bool) -> float:
    """row_entropy at the row's own maximum, or its reference until the kernels are loaded.
    row: float32[V]."""
    return float(kernel_or(_entropy_at_max, row_entropy_reference)(row, top_k, normalized))


def _entropy_at_max(row: np.ndarray, top_k: int, normalized: bool) -> float:
    return row_entropy(row, row[int(np.argmax(row))], top_k, normalized)
