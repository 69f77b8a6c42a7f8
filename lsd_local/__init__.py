"""lsd_local: loose speculative decoding for GGUF models on llama.cpp.

    from lsd_local import Engine
    with Engine.load("target.gguf", "draft.gguf", rule="fly") as eng:
        gen = eng.generate([{"role": "user", "content": "Write quicksort."}], max_tokens=256)
        for event in gen:
            print(event.text, end="", flush=True)
        print(gen.stats.tau, gen.stats.decode_tokens_per_second)
"""

from .engine import DRAFTERS, Engine, Generation
from .errors import (
    ContextOverflowError,
    IncompatibleModelsError,
    LsdError,
    ModelLoadError,
    ModelOutputError,
    ParameterError,
)
from .rules import RULES, RuleConfig
from .stats import GenerationStats, Origin, RoundEvent

__version__ = "0.1.0"

__all__ = [
    "DRAFTERS", "RULES", "ContextOverflowError", "Engine", "Generation", "GenerationStats",
    "IncompatibleModelsError", "LsdError", "ModelLoadError", "ModelOutputError", "Origin",
    "ParameterError", "RoundEvent", "RuleConfig", "__version__",
]
