"""The only package that talks to llama.cpp (through llama-cpp-python's low-level API):
models and their caches (model.py), vocabularies (vocab.py), devices and RPC servers
(devices.py), GBNF grammars (grammar.py), GGUF structure checks (gguf_check.py), whether
extra buffer types may be used on this CPU (cpu_probe.py, tinygguf.py)."""

from ..config import LoadOptions
from .grammar import Grammar, schema_to_gbnf
from .model import Model, SeqState, build_identity, physical_cores, recurrent_message
from .vocab import Vocab, check_vocab_compatible, vocab_compatible

__all__ = ["Grammar", "LoadOptions", "Model", "SeqState", "Vocab", "build_identity",
           "check_vocab_compatible", "physical_cores", "recurrent_message", "schema_to_gbnf",
           "vocab_compatible"]
