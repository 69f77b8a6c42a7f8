"""Log-probabilities from verification rows (verify/logprobs.py) against float64 numpy, on
rows shaped like real ones: wide ranges, -inf (grammar-masked) entries, ties."""

from __future__ import annotations

import numpy as np
import pytest

from lsd_local.verify.logprobs import log_normalizer, token_logprobs


def reference(row: np.ndarray) -> np.ndarray:
    x = row.astype(np.float64)
    peak = x.max()
    return x - peak - np.log(np.exp(x - peak).sum())


@pytest.mark.parametrize("seed", range(30))
def test_log_probabilities_equal_a_float64_softmax(seed):
    rng = np.random.default_rng(seed)
    v = int(rng.integers(2, 160_000))
    row = (rng.standard_normal(v) * rng.uniform(0.1, 8)).astype(np.float32)
    if seed % 3 == 0:
        row[rng.random(v) < 0.7] = -np.inf  # a grammar mask
        row[int(rng.integers(v))] = 1.0
    if seed % 5 == 0:
        row[:10] = row.max()  # ties at the top
    expected = reference(row)
    token = int(np.flatnonzero(np.isfinite(row))[0])
    (got,) = token_logprobs(row[None, :], [token], 5)
    assert got.logprob == pytest.approx(expected[token], abs=1e-5)
    top = np.argsort(-row, kind="stable")[:5]
    assert [t for t, _ in got.top] == top.tolist()
    assert [p for _, p in got.top] == pytest.approx(expected[top].tolist(), abs=1e-5)


def test_a_fully_masked_row_has_a_normalizer_of_minus_infinity():
    assert log_normalizer(np.full(4, -np.inf, np.float32)) == -np.inf
