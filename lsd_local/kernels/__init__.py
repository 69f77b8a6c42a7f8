"""Numba kernels: whether they may be called yet (jit.py, a leaf every layer imports) and
their warm-up off the request path (warmup.py)."""
