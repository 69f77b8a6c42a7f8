"""Build the drafter a configuration asks for over the loaded models (used by the Engine)."""

from __future__ import annotations

from dataclasses import replace

from .auto.policy import AutoDrafter
from .crossvocab import CrossVocabDrafter, TextCodec
from .lookup import LookupDrafter
from .model import ModelDrafter
from .multilevel import MultiLevelDrafter
from .textlookup import TextLookup


def make_drafter(cfg, draft, cross_vocab_target=None, index=None, target_vocab=None):
    """`cfg` is an engine DrafterConfig, `draft` a backend Model or None. With
    `cross_vocab_target` (the target Model, when the draft's vocabulary differs), the draft
    model drafts through text (CrossVocabDrafter). `index`: the suffix index over past
    requests that prompt lookup also searches (suffixstore.SuffixIndex or None);
    `target_vocab`: the target's vocabulary, for text lookup, for where lookup stops (its
    end-of-generation tokens) and for auto to read the answer (code or prose; None: token
    lookup only, no stop, every proposal priced as code)."""
    text = TextLookup(TextCodec(target_vocab)) if target_vocab is not None and \
        cfg.text_lookup else None
    is_stop = target_vocab.is_eog if target_vocab is not None else None
    token_bytes = target_vocab.token_bytes if target_vocab is not None else None
    drafter = auto_drafter(cfg, draft, cross_vocab_target, text, is_stop, token_bytes) \
        if cfg.drafter == "auto" or cfg.adaptive_k else \
        fixed_drafter(cfg, draft, cross_vocab_target, text, is_stop)
    if drafter is not None:
        drafter.use_suffix_index(index)
    return drafter


def auto_drafter(cfg, draft, cross_vocab_target=None, text=None, is_stop=None,
                 token_bytes=None) -> AutoDrafter | None:
    """The cost-aware controller over the drafters the configuration allows; `is_stop`: the
    target's end-of-generation test (lookup drafts no further than such a token);
    `token_bytes`: the target's token id -> text, so that auto tells code from prose."""
    if cfg.drafter == "none":
        return None
    lookup = LookupDrafter(cfg.max_ngram, cfg.min_ngram, text=text, is_stop=is_stop) \
        if cfg.drafter in ("auto", "lookup") else None
    model = None
    if draft is not None and cfg.drafter in ("auto", "model", "multilevel"):
        model = fixed_drafter(replace(cfg, drafter="model" if cfg.drafter == "auto"
                                      else cfg.drafter), draft, cross_vocab_target)
    return AutoDrafter(lookup, model, fixed_k=None if cfg.adaptive_k else cfg.k_value,
                       token_bytes=token_bytes)


def fixed_drafter(cfg, draft, cross_vocab_target=None, text=None, is_stop=None):
    """One drafter with a fixed K (None for drafter 'none')."""
    if cfg.drafter == "lookup":
        return LookupDrafter(cfg.max_ngram, cfg.min_ngram, text=text, is_stop=is_stop)
    if cfg.drafter == "model":
        inner = ModelDrafter(draft, cfg.p_min)
    elif cfg.drafter == "multilevel":
        inner = MultiLevelDrafter(draft, cfg.p_min, cfg.max_ngram, cfg.min_ngram)
    else:
        return None
    if cross_vocab_target is None:
        return inner
    return CrossVocabDrafter(inner, TextCodec(cross_vocab_target.vocab), TextCodec(draft.vocab))
