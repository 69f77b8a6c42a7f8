"""What every drafter returns and the interface the round loop calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..config import SamplerSettings


@dataclass(frozen=True)
class Draft:
    """Proposed tokens and, for a sampled draft model, the distributions they came from."""

    tokens: np.ndarray  # int32[k]
    probs: np.ndarray | None = None  # float64[k, V]: p_d rows; None = one-hot (greedy/lookup)
    source: str = ""  # which drafter made it, when a drafter delegates (auto); "" = the drafter

    def __len__(self) -> int:
        return len(self.tokens)


EMPTY_DRAFT = Draft(np.zeros(0, np.int32))


class Drafter(Protocol):
    """Proposes up to k tokens that follow `history` (every committed token, int32[n])."""

    name: str

    def propose(self, history: np.ndarray, k: int, sampler: SamplerSettings | None = None,
                rng: np.random.Generator | None = None, grammar=None) -> Draft:
        """`grammar` (the state after `history`, or None): a drafter may use it to propose only
        allowed tokens; the loop cuts any draft at its first forbidden token anyway."""
        ...

    def reset(self) -> None: ...
