"""lsd_local: loose speculative decoding for GGUF models on llama.cpp.

    from lsd_local import Engine
    with Engine.load("target.gguf", "draft.gguf", rule="fly") as eng:
        gen = eng.generate([{"role": "user", "content": "Write quicksort."}], max_tokens=256)
        for event in gen:
            print(event.text, end="", flush=True)
        print(gen.stats.tau, gen.stats.decode_tokens_per_second)
"""

from typing import TYPE_CHECKING

from .config import DRAFTERS, RULES, DrafterConfig, RuleConfig, SamplerSettings
from .errors import (
    ContextOverflowError,
    EngineBusyError,
    IncompatibleModelsError,
    LsdError,
    ModelLoadError,
    ModelOutputError,
    ParameterError,
)
from .request import Request
from .stats import GenerationStats, Origin, RoundEvent

if TYPE_CHECKING:  # loaded lazily: see __getattr__
    from .drafters.base import Draft, Drafter
    from .engine import Engine
    from .generation import Generation

__version__ = "0.1.0"

__all__ = [
    "DRAFTERS", "RULES", "ContextOverflowError", "Draft", "Drafter", "DrafterConfig", "Engine",
    "EngineBusyError",
    "Generation",
    "GenerationStats", "SamplerSettings",
    "IncompatibleModelsError", "LsdError", "ModelLoadError", "ModelOutputError", "Origin",
    "ParameterError", "Request", "RoundEvent", "RuleConfig", "__version__",
]


def __getattr__(name: str):
    """Engine and Generation load llama.cpp: imported on first use, so that processes that
    never run a model (lsd serve's HTTP side, `lsd --help`) do not load it."""
    if name == "Engine":
        from .engine import Engine

        return Engine
    if name == "Generation":
        from .generation import Generation

        return Generation
    if name in ("Draft", "Drafter"):  # (the base of a drafter of your own: Engine.configure)
        from .drafters import base

        return getattr(base, name)
    raise AttributeError(f"module 'lsd_local' has no attribute {name!r}")
