"""The drafters an engine has built, by settings: switching back to settings used before
brings back the drafter with what it learned (auto's costs and acceptance); with a learned
store, a new auto drafter starts from what earlier processes learned, and `save` writes it
back."""

from __future__ import annotations

from collections import OrderedDict

from ..config import CUSTOM_DRAFTER, DRAFTERS_KEPT, DrafterConfig
from ..errors import ParameterError
from .base import Drafter
from .custom import NONE_GIVEN
from .factory import make_drafter


class DrafterPool:
    """At most DRAFTERS_KEPT drafters (the least recently used go first: a client varying
    p_min or K must not make the engine grow without end). `draft_model`: a backend Model or
    None; `cross_vocab_target`: the target Model when the draft has another vocabulary;
    `learned`: an auto.learned.LearnedStore or None; `index`: the suffix index every
    drafter that looks up searches (suffixstore.SuffixIndex or None); `target_vocab`: the
    target's vocabulary (backend.Vocab), for text lookup, where lookup stops, and for auto
    to tell code from prose."""

    def __init__(self, draft_model=None, cross_vocab_target=None, learned=None,
                 index=None, target_vocab=None) -> None:
        self._draft_model = draft_model
        self._cross_vocab_target = cross_vocab_target
        self._target_vocab = target_vocab  # (text lookup tokenizes with it, auto reads it)
        self.learned = learned
        self.index = index
        self._built: OrderedDict[DrafterConfig, Drafter | None] = OrderedDict()
        # the user's own drafter (drafters/custom.py), whatever its K; kept apart from the
        # settings built here: it cannot be rebuilt, so it is never dropped for others
        self.custom: Drafter | None = None

    def get(self, config: DrafterConfig, rule: str, fresh: bool = False) -> Drafter | None:
        """The drafter for `config` (None for plain decoding), built when it is not kept or
        `fresh` is asked (a fresh one also ignores what earlier processes learned). The
        custom drafter is the one given to `use_custom` (never rebuilt)."""
        if config.drafter == CUSTOM_DRAFTER:
            if self.custom is None:
                raise ParameterError(NONE_GIVEN, param="drafter")
            return self.custom
        if fresh or config not in self._built:
            drafter = make_drafter(config, self._draft_model, self._cross_vocab_target,
                                   self.index, self._target_vocab)
            if self.learned is not None and drafter is not None and not fresh:
                self.learned.restore(drafter, config, rule)
            self._built[config] = drafter
        self._built.move_to_end(config)
        while len(self._built) > DRAFTERS_KEPT:
            self._built.popitem(last=False)
        return self._built[config]

    def use_custom(self, drafter: Drafter) -> None:
        """The drafter that DrafterConfig("custom") means from now on (replacing any before;
        it is told the suffix index, as the others are)."""
        drafter.use_suffix_index(self.index)
        self.custom = drafter

    def _every(self) -> list[Drafter]:
        return [d for d in (*self._built.values(), self.custom) if d is not None]

    def use_suffix_index(self, index) -> None:
        """Every drafter, built or to be built, searches and feeds `index` (or none)."""
        self.index = index
        for drafter in self._every():
            drafter.use_suffix_index(index)

    def reset(self) -> None:
        """Every drafter forgets what it built from earlier text (not what it learned)."""
        for drafter in self._every():
            drafter.reset()

    def save(self, rule: str) -> None:
        """Save what the auto drafters learned (OSError when the cache dir cannot be
        written); nothing without a learned store."""
        if self.learned is not None:
            self.learned.save(self._built, rule)
