"""The engine's prompt lookup drafts no further than the target's end-of-generation token
(real vocabulary, tiny GGUF): what follows one is never committed."""

from __future__ import annotations

import numpy as np

from lsd_local import Engine
from lsd_local.drafters.factory import make_drafter


def test_the_engine_lookup_stops_at_the_target_end_of_generation_token(tiny_pair):
    with Engine.load(tiny_pair[0], drafter="auto", n_ctx=512) as eng:
        vocab = eng.target.vocab
        assert vocab.is_eog(vocab.eos_token)
        words = vocab.tokenize("the cat sat on the mat and the dog ran", add_special=False)
        assert len(words) >= 8 and not any(vocab.is_eog(t) for t in words)
        # the passage, an end, more text; then the passage again: lookup continues it
        history = np.array(words + [vocab.eos_token] + words[::-1] + words, np.int32)
        drafter = make_drafter(eng.drafter_config, None, target_vocab=vocab)
        draft = drafter.lookup.propose(history, 8)
        assert draft.tokens.tolist() == [vocab.eos_token]
        drafter.lookup.is_stop = None  # without it, the draft runs past the end
        assert len(drafter.lookup.propose(history, 8).tokens) == 8
