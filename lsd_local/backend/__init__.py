"""The only package that talks to llama.cpp (through llama-cpp-python's low-level API):
models and their caches (model.py), vocabularies (vocab.py), devices and RPC servers
(devices.py), GBNF grammars (grammar.py), the bench's peer (peer.py)."""

from .grammar import Grammar, schema_to_gbnf
from .model import LoadOptions, Model, SeqState, build_identity, physical_cores
from .peer import PeerLlama
from .vocab import Vocab, check_vocab_compatible, vocab_compatible

__all__ = ["Grammar", "LoadOptions", "Model", "PeerLlama", "SeqState", "build_identity",
           "check_vocab_compatible",
           "Vocab", "physical_cores", "schema_to_gbnf", "vocab_compatible"]
