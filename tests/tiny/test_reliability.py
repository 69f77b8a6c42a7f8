"""Bad input and interruptions on real llama.cpp (tiny models): recurrent models, Ctrl-C in
prefill, rounds and the CLI, special-token prompts, streaming multi-byte text, usage errors."""

from __future__ import annotations

import pytest
import tinymodels
from click.testing import CliRunner

import lsd_local.backend.model as backend_model
from lsd_local import Engine, IncompatibleModelsError, ParameterError
from lsd_local.cli import cli

CTX = 512


@pytest.fixture(scope="module")
def mamba(tmp_path_factory):
    return tinymodels.make_mamba(tmp_path_factory.mktemp("mamba"))


@pytest.mark.parametrize("drafter", ["lookup", "model", "multilevel"])
def test_recurrent_model_with_speculation_is_refused(mamba, tiny_pair, drafter):
    draft = tiny_pair[1] if drafter != "lookup" else None
    with pytest.raises(IncompatibleModelsError, match="recurrent/hybrid.*drafter='none'"):
        Engine.load(mamba, draft, drafter=drafter, n_ctx=CTX)


def test_recurrent_model_with_auto_decodes_plainly(mamba):
    with pytest.warns(UserWarning, match="recurrent/hybrid"), Engine.load(
            mamba, drafter="auto", n_ctx=CTX) as eng:
        assert eng.drafter_config.drafter == "none"
        first = eng.generate("the cat is", max_tokens=12).run().tokens
        other = eng.generate("a b a b", max_tokens=12).run().tokens  # state dropped, not cut
        assert eng.generate("the cat is", max_tokens=12).run().tokens == first
        assert len(other) == 12
    result = CliRunner().invoke(cli, ["run", str(mamba), "the cat", "--raw", "--max-tokens",
                                      "5"])
    assert result.exit_code == 0 and "plain decoding" in result.stderr


def interrupt_decode(monkeypatch, at_call: int) -> dict:
    """Ctrl-C arriving while llama_decode runs: Python raises it once the C call returns, so
    the KV cache already holds the batch the Python side never recorded."""
    real = backend_model.ll.llama_decode
    state = {"calls": 0}

    def decode(ctx, batch):
        rc = real(ctx, batch)
        state["calls"] += 1
        if state["calls"] == at_call:
            raise KeyboardInterrupt
        return rc

    monkeypatch.setattr(backend_model.ll, "llama_decode", decode)
    return state


@pytest.mark.parametrize("drafter", ["lookup", "model", "auto"])
@pytest.mark.parametrize("at_call", [1, 2, 5, 9])
def test_ctrl_c_in_prefill_or_a_round_leaves_the_engine_usable(tiny_pair, plain, monkeypatch,
                                                               drafter, at_call):
    prompt = "the cat is on the mat " * 8
    with Engine.load(tiny_pair[0], tiny_pair[1] if drafter != "lookup" else None,
                     drafter=drafter, k=4 if drafter != "auto" else None, p_min=0.0,
                     n_ctx=CTX) as eng:
        state = interrupt_decode(monkeypatch, at_call)
        with pytest.raises(KeyboardInterrupt):
            eng.generate(prompt, max_tokens=60).run()
        assert state["calls"] == at_call
        monkeypatch.undo()
        for text in (prompt, "a b a b"):  # same prompt (cache reuse) and another one
            assert eng.generate(text, max_tokens=40).run().tokens == \
                plain.generate(text, max_tokens=40).run().tokens


def test_ctrl_c_in_lsd_run_exits_130_without_traceback(tiny_pair, monkeypatch):
    interrupt_decode(monkeypatch, 3)
    result = CliRunner().invoke(cli, ["run", str(tiny_pair[0]), "the cat is", "--raw",
                                      "--max-tokens", "50"])
    assert result.exit_code == 130 and "Interrupted." in result.output
    assert "Traceback" not in result.output


def test_ctrl_c_in_chat_stops_the_answer_and_the_next_one_works(tiny_pair, monkeypatch):
    interrupt_decode(monkeypatch, 2)  # the first answer's prefill or first round
    result = CliRunner().invoke(cli, ["chat", str(tiny_pair[0]), "--max-tokens", "10",
                                      "--drafter", "lookup"],
                                input="the cat is\na b a b\n/stats\n")
    assert result.exit_code == 0, result.output
    assert "[interrupted]" in result.output and "session: 2 answers" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("prompt", ["<s></s>", "</s>", "<s>", "<unk><s>"])
def test_prompt_of_only_special_tokens(plain, prompt):
    ids = plain.prompt_tokens(prompt)
    assert ids and all(t < 3 for t in ids)  # <unk> <s> </s>, parsed as special tokens
    gen = plain.generate(prompt, max_tokens=8).run()
    assert gen.stats.prompt_tokens == len(ids)
    ended = bool(gen.tokens) and plain.target.vocab.is_eog(gen.tokens[-1])
    assert gen.finish_reason == ("stop" if ended else "length")
    assert ended or len(gen.tokens) == 8


def test_k_beyond_n_batch_is_a_named_error(tiny_pair):
    with Engine.load(tiny_pair[0], drafter="lookup", k=8, n_ctx=CTX) as eng, \
            pytest.raises(ParameterError, match="invalid k: .*n_batch"):
        eng.configure(k=eng.target.n_batch)


def test_k_larger_than_the_remaining_context(tiny_pair, plain):
    with Engine.load(tiny_pair[0], drafter="lookup", k=64, n_ctx=64) as eng:
        n_ctx = eng.target.n_ctx  # llama.cpp rounds small contexts up (256)
        prompt = "a b " * 20
        gen = eng.generate(prompt, max_tokens=5000).run()
        assert gen.finish_reason == "length" and eng.target.n_cached < n_ctx
        assert len(eng.prompt_tokens(prompt)) + len(gen.tokens) == n_ctx
        assert gen.tokens == plain.generate(prompt, max_tokens=len(gen.tokens)).run().tokens


def test_streamed_multibyte_text_has_no_replacement_characters(tiny_pair):
    """Characters of 2-4 bytes spelled with byte tokens, several tokens each: every streamed
    delta is whole characters, and the deltas add up to the exact text."""
    grammar = 'root ::= [é✓½😀ü]{12} "."'
    with Engine.load(tiny_pair[0], drafter="lookup", k=8, n_ctx=CTX) as eng:
        for prompt in ("the cat", "a b a", "def f"):
            gen = eng.generate(prompt, max_tokens=80, grammar=grammar)
            deltas = [event.text for event in gen]
            text = "".join(deltas)
            assert "\ufffd" not in text and text == gen.text
            assert len(text) == 13 and len(gen.tokens) > 13  # multi-token characters


@pytest.mark.parametrize("args,name", [
    (["--theta", "-1"], "--theta"), (["--window", "0"], "--window"), (["-k", "0"], "-k"),
    (["--budget", "-1"], "--budget"), (["--gate", "-2"], "--gate"),
    (["--temperature", "-0.5"], "--temperature"), (["--top-p", "0"], "--top-p"),
    (["--top-p", "1.5"], "--top-p"), (["--min-p", "2"], "--min-p"), (["--top-k", "-1"], "--top-k"),
    (["--rule", "loose"], "--rule"), (["--drafter", "magic"], "--drafter"),
    (["--max-tokens", "-1"], "--max-tokens"), (["--ctx", "0"], "--ctx"),
    (["--threads", "0"], "--threads"), (["--entropy-top-k", "0"], "--entropy-top-k"),
])
def test_invalid_cli_values_are_usage_errors(tiny_pair, args, name):
    result = CliRunner().invoke(cli, ["run", str(tiny_pair[0]), "hi", *args])
    assert result.exit_code == 2, result.output
    assert name in result.output and "Traceback" not in result.output
