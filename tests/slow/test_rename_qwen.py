"""Renames (drafters/rename.py) with the real Qwen2.5-Coder tokenizer and target (-m slow):
a rename read in the def line is spelled into lookup's later proposals as the tokenizer
spells it, and strict speculation on a rename request still writes plain greedy
decoding's tokens."""

from __future__ import annotations

import numpy as np
import pytest
from test_drafting_qwen import logged, same_or_numerical_tie

from lsd_local import Engine
from lsd_local.backend import LoadOptions, Model
from lsd_local.drafters.crossvocab import TextCodec
from lsd_local.drafters.lookup import LookupDrafter
from lsd_local.drafters.textlookup import TextLookup

pytestmark = pytest.mark.slow

CODE = '''```python
def running_total(values, start=0):
    if not values:
        raise ValueError('running_total needs at least one value')
    if len(values) == 1:
        return start + values[0]
    return running_total(values[1:], start + values[0])
```'''
ASK = ("Rename the function `running_total` to `running_total_v2` (and any call to itself). "
       "Reply with the whole function in one code block and nothing else.\n\n" + CODE)


def test_a_rename_is_spelled_into_the_copy_with_the_real_tokenizer(qwen_pair):
    target = Model.load(str(qwen_pair[0]), LoadOptions(n_ctx=256, n_gpu_layers=0,
                                                       no_repack=True))
    try:
        codec = TextCodec(target.vocab)
        prompt = target.vocab.tokenize_bytes(("user: " + ASK + "\nassistant:\n").encode(),
                                             False, False)
        answer = target.vocab.tokenize_bytes(
            b"```python\ndef running_total_v2(values, start=0):\n    if not", False, False)
        lookup = LookupDrafter(text=TextLookup(codec))
        lookup.begin(None, len(prompt))
        draft = lookup.propose(np.asarray(prompt + answer, np.int32), 64)
    finally:
        target.close()
    assert lookup.renames.renames == {b"running_total": b"running_total_v2"}
    text = codec.text(draft.tokens).decode()
    assert "'running_total_v2 needs at least one value'" in text
    assert "return running_total_v2(values[1:]" in text
    assert 0 < draft.renamed_at < len(draft.tokens)


def test_strict_speculation_on_a_rename_writes_plain_greedy_decodings_tokens(qwen_pair):
    messages = [{"role": "user", "content": ASK}]
    with Engine.load(qwen_pair[0], drafter="none", n_ctx=2048, n_threads=2) as plain:
        want = logged(plain.generate(messages, max_tokens=160, logprobs=2))
    assert want.text.count("running_total_v2") >= 2  # (the model renames the calls too)
    with Engine.load(qwen_pair[0], drafter="auto", n_ctx=2048, n_threads=2) as eng:
        gen = eng.generate(messages, max_tokens=160).run()
    same_or_numerical_tie(gen.tokens, want)
    assert gen.stats.accepted_by_source.get("lookup", 0) > 40
