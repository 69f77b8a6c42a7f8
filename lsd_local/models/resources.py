"""Where the shipped data lives: models.toml, grammars/*.gbnf and the bench's prompt sets.

The project keeps them at the top level of the repository, the only copy. The build ships
them inside the package as lsd_local/data/ (pyproject.toml maps them there), so that every
kind of install (a venv, `pip install --user`, `--target`, a wheel) finds them through
importlib.resources. A source checkout, an editable install included, has no
lsd_local/data/: there they are read where the repository keeps them.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def data_dir() -> Path:
    """The folder holding models.toml, grammars/ and bench/."""
    packaged = resources.files("lsd_local") / "data"
    if packaged.is_dir():
        return Path(str(packaged))  # installed packages are folders (numba needs files too)
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file():  # a source checkout, not site-packages
        return checkout
    # a broken install: the missing folder, so that every lookup says "not found" instead of
    # reading some unrelated site-packages/bench
    return Path(str(packaged))


def data_path(*parts: str) -> Path | None:
    """A shipped file or folder, or None when this install lacks it."""
    path = data_dir().joinpath(*parts)
    return path if path.exists() else None
