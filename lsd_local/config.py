"""Every default of the verification rules, defined once.

A leaf module: it imports nothing from lsd, so that every layer (the pure verifiers included)
can take its defaults from here. The values were chosen by `lsd bench --tune --prompts
humaneval --limit 8` (dev split, disjoint from the evaluation prompts; Qwen2.5-Coder 1.5B,
prompt lookup, 2-core CPU): the fastest settings that kept pass@1 at 100 % of plain decoding
(README, "Tuning the loose rules").
"""

from __future__ import annotations

FLY_THETA = 0.6  # FLy entropy threshold; inf = strict
# FLy's window W = min(FLY_WINDOW, K - 1): the W draft tokens after a mismatch must all match
# (vLLM's `fly_window_size` semantics; AMD's reference `win_len` = 6 counts the mismatch itself)
FLY_WINDOW = 4
FLY_ENTROPY_TOP_K = 3  # FLy: entropy over the k_e largest probabilities
FLY_ENTROPY = "topk"  # "topk" (reference code, vLLM) or "normalized" (the paper's H / log V)
ASD_GATE = 2.0  # ASD local gate g on regret / tokens left in the block
ASD_MAX_EXCEPTIONS = 2  # ASD per-block exception cap M
ASD_BUDGET = 6.0  # ASD per-request regret budget B
