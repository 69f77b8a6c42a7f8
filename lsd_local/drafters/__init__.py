"""Drafters propose the next K tokens cheaply. They never import llama_cpp: the draft model is
a backend Model handed in by the engine."""

from __future__ import annotations

from ..kernels.lookup import lookup_match, lookup_reference
from .base import Draft, Drafter
from .lookup import LookupDrafter
from .model import ModelDrafter
from .multilevel import MultiLevelDrafter

__all__ = ["Draft", "Drafter", "LookupDrafter", "ModelDrafter", "MultiLevelDrafter",
           "lookup_match", "lookup_reference"]
