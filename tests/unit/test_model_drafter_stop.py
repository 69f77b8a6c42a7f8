"""The draft model's drafters stop at an end-of-generation token: nothing after one is ever
committed (loop._commit), so drafting on past it only adds verified rows."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import EOS, FakeTarget

from lsd_local.drafters.model import ModelDrafter
from lsd_local.drafters.multilevel import MultiLevelDrafter


@pytest.mark.parametrize("make", [lambda m: ModelDrafter(m, p_min=0.0),
                                  lambda m: MultiLevelDrafter(m, p_min=0.0)])
def test_a_drafted_end_of_generation_token_ends_the_draft(make):
    history = np.array([3, 5, 7, 9], np.int32)
    ending = make(FakeTarget(eos_after=(7, 9)))  # the draft model's next token ends the text
    assert ending.propose(history, 6).tokens.tolist() == [EOS]
    going_on = make(FakeTarget(eos_after=(1, 2)))  # no end in sight: K tokens
    draft = going_on.propose(history, 6).tokens.tolist()
    assert len(draft) == 6 and EOS not in draft
