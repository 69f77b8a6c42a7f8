"""The auto drafter (policy.py): prompt lookup, the draft model or no draft, and how many
tokens, chosen per round from online cost (estimators.py) and acceptance models
(estimators.py, lookup_acceptance.py), with what earlier processes learned (learned.py)."""

from .policy import AutoDrafter

__all__ = ["AutoDrafter"]
