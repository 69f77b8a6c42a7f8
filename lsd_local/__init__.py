"""lsd_local: loose speculative decoding for GGUF models on llama.cpp.

    from lsd_local import Engine
    with Engine.load("target.gguf", "draft.gguf", rule="fly") as eng:
        gen = eng.generate([{"role": "user", "content": "Write quicksort."}], max_tokens=256)
        for event in gen:
            print(event.text, end="", flush=True)
        print(gen.stats.tau, gen.stats.decode_tokens_per_second)
"""

from .config import DRAFTERS, RULES, DrafterConfig, RuleConfig, SamplerSettings
from .engine import Engine, Generation
from .errors import (
    ContextOverflowError,
    IncompatibleModelsError,
    LsdError,
    ModelLoadError,
    ModelOutputError,
    ParameterError,
)
from .stats import GenerationStats, Origin, RoundEvent

__version__ = "0.1.0"

__all__ = [
    "DRAFTERS", "RULES", "ContextOverflowError", "DrafterConfig", "Engine", "Generation",
    "GenerationStats", "SamplerSettings",
    "IncompatibleModelsError", "LsdError", "ModelLoadError", "ModelOutputError", "Origin",
    "ParameterError", "RoundEvent", "RuleConfig", "__version__",
]
