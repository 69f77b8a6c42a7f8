"""A family whose turn ends with a marker its GGUF need not count as an end of generation
(Ling 3's `<|role_end|>`, a control token; llama.cpp adds it as a stop): a chat answer ends
there, and neither the marker nor what the model would write after it is the answer's."""

from __future__ import annotations

from tinymodels import LING_TEMPLATE, TINY_CTX, agent_token, make_ling_model

from lsd_local import Engine
from lsd_local.chat.turns import turn_ends

ASK = [{"role": "user", "content": "the cat is"}]


def test_a_chat_answer_ends_at_the_familys_end_of_turn(tmp_path):
    assert turn_ends(LING_TEMPLATE) == ("<|role_end|>",)
    assert turn_ends(LING_TEMPLATE.replace("ASSISTANT", "BOT")) == ()
    model = make_ling_model(tmp_path)
    with Engine.load(model, drafter="lookup", n_ctx=TINY_CTX) as eng:
        end = agent_token(eng.target.vocab, "<|role_end|>")
        assert not eng.target.vocab.is_eog(end)
        gen = eng.generate(ASK, max_tokens=40, seed=1, logit_bias={end: 4.0}).run()
        assert gen.finish_reason == "stop" and gen.tokens[-1] == end  # (nothing after it)
        before = b"".join(eng.target.vocab.token_bytes(t) for t in gen.tokens[:-1])
        assert gen.text == before.decode("utf-8", "replace") and len(gen.tokens) < 40
        # (a raw prompt is no chat turn: the marker is only text there)
        raw = eng.generate("the cat is", max_tokens=12, seed=1, logit_bias={end: 4.0}).run()
        assert raw.finish_reason == "length"
