"""The `lsd` command line against tiny generated models (click's CliRunner)."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from lsd_local.cli import cli

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def invoke(*args, input=None, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input, env=env)


@pytest.fixture()
def hub_env(tmp_path, tiny_pair):
    """A user registry naming the tiny pair, and an offline Hub cache that holds them, laid out
    exactly as huggingface_hub writes it (refs/main -> snapshots/<commit>/<file>)."""
    config = tmp_path / "config" / "lsd"
    config.mkdir(parents=True)
    (config / "models.toml").write_text(
        '[tiny]\nrepo = "lsd-test/tiny-GGUF"\nfile = "target.gguf"\nctx = 256\n'
        'draft = "tiny-draft"\n\n'
        '[tiny-draft]\nrepo = "lsd-test/tiny-draft-GGUF"\nfile = "draft.gguf"\n\n'
        '[tiny-qa]\nrepo = "lsd-test/tiny-GGUF"\nfile = "target.gguf"\nctx = 256\n'
        'chat_template = "{% for m in messages %}Q: {{ m.content }}\\n{% endfor %}A:"\n')
    cache = tmp_path / "hub"
    for repo, path in (("tiny-GGUF", tiny_pair[0]), ("tiny-draft-GGUF", tiny_pair[1])):
        root = cache / f"models--lsd-test--{repo}"
        (root / "refs").mkdir(parents=True)
        (root / "refs" / "main").write_text(COMMIT)
        (root / "snapshots" / COMMIT).mkdir(parents=True)
        shutil.copy(path, root / "snapshots" / COMMIT / path.name)
    return {"XDG_CONFIG_HOME": str(tmp_path / "config"), "HF_HUB_CACHE": str(cache),
            "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"}


def test_run_json_reports_stats(tiny_pair):
    result = invoke("run", tiny_pair[0], "the cat is", "--draft", tiny_pair[1], "-k", "3",
                    "--max-tokens", "24", "--ctx", "256", "--p-min", "0", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["finish_reason"] == "length"
    stats = data["stats"]
    assert stats["generated_tokens"] == 24
    assert stats["prompt_tokens"] > 0 and stats["rounds"] > 0 and stats["drafted"] > 0
    for key in ("prefill_seconds", "decode_seconds", "decode_tokens_per_second", "drafted",
                "accepted", "accepted_loose", "tau", "acceptance_rate"):
        assert key in stats
    assert stats["tau"] == stats["generated_tokens"] / stats["rounds"]


def test_run_reads_stdin_and_prints_summary(tiny_pair):
    result = invoke("run", tiny_pair[0], "--raw", "--max-tokens", "10", "--ctx", "256",
                    input="the cat is")
    assert result.exit_code == 0, result.output
    assert "[10 tokens" in result.output and "tok/s" in result.output


def test_run_same_text_as_library(tiny_pair):
    from lsd_local import Engine
    with Engine.load(tiny_pair[0], drafter="none", n_ctx=256) as eng:
        expected = eng.generate([{"role": "user", "content": "a b"}], max_tokens=12).run().text
    result = invoke("run", tiny_pair[0], "a b", "--max-tokens", "12", "--ctx", "256", "--json")
    assert json.loads(result.stdout)["text"] == expected


def test_chat_two_turns_reset_stats_exit(tiny_pair):
    script = "the cat is\n/stats\nand then\n/reset\n/mode fly\n/mode bogus\n/help\nhello\n"
    result = invoke("chat", tiny_pair[0], "--max-tokens", "8", "--ctx", "512",
                    "--system", "be brief", input=script)
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.count("[8 tokens") == 3  # one summary line per answer
    assert "session: 1 answers, 8 tokens" in out
    assert "drafts by " in out and "rounds per K" in out  # what auto chose
    assert "(conversation cleared)" in out and "(rule: fly)" in out
    assert "Error: invalid rule: 'bogus'" in out
    assert "/mode strict|fly|asd" in out  # the help text


def test_chat_reuses_the_cache_between_turns(tiny_pair):
    from lsd_local import Engine
    from lsd_local.cli.session import ChatSession
    with Engine.load(tiny_pair[0], n_ctx=512) as eng:
        session = ChatSession(eng, None, {"max_tokens": 6})
        turns = []
        for text in ("first question", "second question"):
            gen = session.ask(text)
            gen.run()
            session.finish(gen)
            turns.append(gen.stats)
        # The whole first prompt is reused (the random model's answer may re-tokenize
        # differently, so reuse can stop inside it).
        assert turns[1].cached_prompt_tokens >= turns[0].prompt_tokens - 1
        assert len(session.messages) == 4


def test_show_drafts_colours_only_on_a_terminal(tiny_pair):
    from lsd_local.cli.chat import render_spans
    from lsd_local.stats import Origin
    spans = (("a", Origin.DRAFT_EXACT), ("b", Origin.DRAFT_LOOSE), ("c", Origin.TARGET))
    assert render_spans(spans, colour=False) == "abc"
    coloured = render_spans(spans, colour=True)
    assert "\x1b[32ma" in coloured and "\x1b[33mb" in coloured and coloured.endswith("c")
    # CliRunner's stdout is not a terminal: --show-drafts prints plain text
    result = invoke("run", tiny_pair[0], "x", "--max-tokens", "5", "--ctx", "256",
                    "--show-drafts")
    assert result.exit_code == 0 and "\x1b[" not in result.output


def test_registry_name_resolves_through_the_offline_hub_cache(hub_env):
    result = invoke("run", "tiny", "hello", "--drafter", "model", "-k", "3", "--p-min", "0",
                    "--max-tokens", "6",
                    "--json", env=hub_env)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout.splitlines()[-1])
    assert data["stats"]["generated_tokens"] == 6 and data["stats"]["drafted"] > 0


@pytest.mark.parametrize("drafter, draft, gpu, wanted", [
    (None, None, 0, ("auto", True)),  # the registry draft is downloaded: auto may use it
    (None, "none", 0, ("auto", False)),
    ("lookup", None, 0, ("lookup", False)),
    ("model", None, 0, ("model", True)),
])
def test_default_drafter_is_auto_with_a_downloaded_draft(hub_env, monkeypatch, drafter, draft,
                                                         gpu, wanted):
    from lsd_local.models.resolve import resolve_models
    for key, value in hub_env.items():
        monkeypatch.setenv(key, value)
    found = resolve_models("tiny", draft, drafter, gpu, notify=lambda message: None)
    assert (found.drafter, found.draft is not None) == wanted


def test_registry_chat_template_override(hub_env, tiny_pair):
    from lsd_local.backend import LoadOptions, Model
    result = invoke("run", "tiny-qa", "hello", "--max-tokens", "2", "--json", env=hub_env)
    assert result.exit_code == 0, result.output
    model = Model.load(tiny_pair[0], LoadOptions(n_ctx=64))
    try:
        expected = len(model.vocab.tokenize("Q: hello\nA:", add_special=True))
    finally:
        model.close()
    assert json.loads(result.stdout.splitlines()[-1])["stats"]["prompt_tokens"] == expected


def test_models_lists_registry_and_cache_state(hub_env):
    result = invoke("models", env=hub_env)
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line for line in result.output.splitlines()}
    assert lines["tiny"].split()[-1] == "yes" and "tiny-draft" in lines["tiny"]
    assert lines["qwen2.5-coder-1.5b"].split()[-1] == "no"
    assert "qwen2.5-coder-0.5b" in lines["qwen2.5-coder-1.5b"]


def test_pull_offline_uses_cache_or_names_the_file(hub_env):
    result = invoke("pull", "tiny", env=hub_env)
    assert result.exit_code == 0, result.output
    assert result.output.count(".gguf") >= 2
    result = invoke("pull", "qwen2.5-coder-7b", env=hub_env)
    assert result.exit_code == 1
    assert "Qwen2.5-Coder-7B-Instruct-Q4_K_M.gguf" in result.output
    assert "HF_HUB_OFFLINE" in result.output and "Traceback" not in result.output


def test_unknown_model_suggests_close_names(hub_env):
    result = invoke("run", "qwen2.5-coder-1.5", "hi", env=hub_env)
    assert result.exit_code == 1
    assert "Did you mean" in result.output and "qwen2.5-coder-1.5b" in result.output


def test_missing_model_is_one_line(tmp_path):
    result = invoke("run", tmp_path / "missing.gguf", "hi")
    assert result.exit_code == 1
    assert result.output.strip().startswith("Error: model file not found")
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_corrupt_model_is_one_line(tmp_path, tiny_pair):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(tiny_pair[0].read_bytes()[:5000])
    result = invoke("run", bad, "hi")
    assert result.exit_code == 1 and result.output.startswith(
        "Error: corrupt GGUF file bad.gguf: the file ends inside its metadata")
    assert len(result.output.strip().splitlines()) == 1


def test_mismatched_draft_drafts_through_text(tiny_pair, tiny_other_vocab):
    result = invoke("run", tiny_pair[0], "hi", "--draft", tiny_other_vocab, "--max-tokens", 8)
    assert result.exit_code == 0 and "Traceback" not in result.output
    assert "has another vocabulary" in result.output


def test_invalid_option_values_are_usage_errors(tiny_pair):
    result = invoke("run", tiny_pair[0], "hi", "--theta", "-1")
    assert result.exit_code == 2 and "--theta" in result.output
    result = invoke("run", tiny_pair[0], "hi", "--drafter", "model")
    assert result.exit_code == 2 and "needs a draft model" in result.output
    result = invoke("run", tiny_pair[0], "hi", "--tensor-split", "a,b")
    assert result.exit_code == 2 and "tensor_split" in result.output


@pytest.fixture()
def no_default_cached(tmp_path):
    """An empty Hub cache and config: nothing but the embedded model can serve."""
    return {"HF_HUB_CACHE": str(tmp_path / "empty-hub"), "HF_HUB_OFFLINE": "1",
            "XDG_CONFIG_HOME": str(tmp_path / "empty-config"), "NO_COLOR": "1"}


def test_run_without_model_uses_the_embedded_default(no_default_cached):
    from lsd_local.models.embedded import embedded_model
    if embedded_model() is None:
        pytest.skip('the demo extra is not installed (pip install "lsd-local[demo]")')
    result = invoke("run", "Name a colour.", "--max-tokens", "12", "--json",
                    env=no_default_cached)
    assert result.exit_code == 0, result.output
    assert "using the embedded demo model SmolLM2-135M-Instruct" in result.output
    data = json.loads(result.stdout.splitlines()[-1])
    assert data["stats"]["generated_tokens"] > 0 and data["text"].strip()


def test_run_without_model_or_demo_names_the_install_command(no_default_cached, monkeypatch):
    import lsd_local.models.resolve
    monkeypatch.setattr(lsd_local.models.resolve, "embedded_model", lambda: None)
    result = invoke("run", "Name a colour.", env=no_default_cached)
    assert result.exit_code == 1
    assert 'pip install "lsd-local[demo]"' in result.output
    assert "Traceback" not in result.output


def test_run_arguments_model_or_prompt(tiny_pair):
    from lsd_local.cli import split_run_args
    assert split_run_args((str(tiny_pair[0]),)) == (str(tiny_pair[0]), None)
    assert split_run_args(("qwen2.5-coder-1.5b",)) == ("qwen2.5-coder-1.5b", None)
    assert split_run_args(("Name a colour.",)) == (None, "Name a colour.")
    assert split_run_args(("m.gguf", "hi")) == ("m.gguf", "hi")
    assert split_run_args(()) == (None, None)
    # a slash does not make a path: whitespace means prompt; Hub names are models
    question = "What is 3/4? Answer in one word."
    assert split_run_args((question,)) == (None, question)
    assert split_run_args(("3/4",)) == (None, "3/4")
    assert split_run_args(("bartowski/Qwen2.5-GGUF:q4_k_m",)) == (
        "bartowski/Qwen2.5-GGUF:q4_k_m", None)
    assert split_run_args(("Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",))[0] is not None
    assert split_run_args(("owner/model:Q8_0",))[0] == "owner/model:Q8_0"
    assert split_run_args(("hf.co/owner/repo",)) == ("hf.co/owner/repo", None)
    assert split_run_args(("Model.GGUF",)) == ("Model.GGUF", None)
    for prompt in ("and/or", "I/O", "TCP/IP", "yes/no", "~nobody-at-all", "x" * 300):
        assert split_run_args((prompt,)) == (None, prompt)
    # --model: no argument is ever taken for a model
    assert split_run_args(("m.gguf",), "x.gguf") == ("x.gguf", "m.gguf")
    assert split_run_args((), "x.gguf") == ("x.gguf", None)


def test_run_with_a_slash_in_the_prompt_answers_it(tiny_pair, no_default_cached, monkeypatch):
    """`lsd run "What is 3/4? ..."` once said `model file not found: What is 3/4? ...`."""
    import lsd_local.models.resolve
    monkeypatch.setattr(lsd_local.models.resolve, "embedded_model", lambda: tiny_pair[0])
    result = invoke("run", "What is 3/4? Answer in one word.", "--max-tokens", 4,
                    env=no_default_cached)
    assert result.exit_code == 0, result.output
    assert "not found" not in result.output and "tokens," in result.output


def test_run_model_option_takes_the_argument_as_prompt(tiny_pair):
    tiny_copy = tiny_pair[0]
    a = invoke("run", "-m", tiny_copy, "--raw", "the cat is", "--max-tokens", 6, "--json")
    b = invoke("run", tiny_copy, "--raw", "the cat is", "--max-tokens", 6, "--json")
    assert a.exit_code == 0, a.output
    assert json.loads(a.stdout)["text"] == json.loads(b.stdout)["text"]
    both = invoke("chat", tiny_copy, "-m", tiny_copy)
    assert both.exit_code == 2 and "give the model once" in both.output


def test_hub_name_is_a_model_with_a_clear_error(hub_env):
    result = invoke("run", "someone/some-model-GGUF:Q4_K_M", env=hub_env, input="hi")
    assert result.exit_code == 1
    assert ("someone/some-model-GGUF is not in the Hugging Face cache and HF_HUB_OFFLINE=1"
            in result.output)
    assert "Traceback" not in result.output
    typo = invoke("run", "-m", "models/missing.GGUF", "hi", env=hub_env)
    assert typo.exit_code == 1 and "model file not found" in typo.output


@pytest.mark.parametrize("data", [b"\xff\xfe x", b"caf\xc3", b"\x00\x80 the cat \xed\xa0\x80"])
def test_invalid_utf8_on_stdin_is_answered(tiny_pair, data):
    result = CliRunner().invoke(cli, ["run", str(tiny_pair[0]), "--raw", "--max-tokens", "3",
                                      "--json"], input=data)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["stats"]["prompt_tokens"] > 1


def test_undecodable_command_line_bytes_are_answered(tiny_pair):
    """argv bytes that are not UTF-8 reach Python as lone surrogates (surrogateescape)."""
    prompt = b"the \xff cat".decode("utf-8", "surrogateescape")
    result = invoke("run", tiny_pair[0], "--raw", prompt, "--max-tokens", 3, "--json")
    assert result.exit_code == 0, result.output
    grammar = invoke("run", tiny_pair[0], "x", "--raw", "--grammar", 'root ::= "a\udcff"',
                     "--max-tokens", 8, "--json")
    assert grammar.exit_code == 0, repr(grammar.exception)
    assert json.loads(grammar.stdout)["text"] == "a\ufffd"  # the byte became U+FFFD


def test_run_stop_string_ends_the_answer(tiny_pair):
    base = ["run", tiny_pair[0], "--raw", "the cat is", "--max-tokens", "40", "--ctx", "256",
            "--json"]
    full = json.loads(invoke(*base).stdout)["text"]
    stop = full[10:14]
    cut = json.loads(invoke(*base, "--stop", stop).stdout)
    assert cut["finish_reason"] == "stop"
    assert cut["text"] == full[:full.index(stop)]


def test_chat_drops_oldest_turns_when_the_context_is_full(tiny_pair):
    from lsd_local import ContextOverflowError, Engine
    from lsd_local.cli.session import ChatSession
    with Engine.load(tiny_pair[0], n_ctx=256) as eng:
        session = ChatSession(eng, "be brief", {"max_tokens": 20})
        for i in range(8):
            gen = session.ask(f"question {i}: " + "the cat is in the house " * 3)
            gen.run()
            session.finish(gen)
        assert session.dropped_turns > 0
        assert session.messages[0] == {"role": "system", "content": "be brief"}
        assert session.messages[-2]["content"].startswith("question 7")
        assert len(eng.prompt_tokens(session.messages[:-1])) < eng.target.n_ctx
        with pytest.raises(ContextOverflowError):
            session.ask("the cat is " * 200)  # too long even alone
        assert session.messages[-1]["role"] == "assistant"


def test_every_option_can_come_from_the_environment(tiny_pair):
    base = ["run", tiny_pair[0], "--raw", "the cat is", "--json"]
    result = invoke(*base, env={"LSD_RUN_MAX_TOKENS": "3", "LSD_RUN_DRAFTER": "none"})
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)["stats"]
    assert stats["generated_tokens"] == 3 and stats["drafted"] == 0
    overridden = invoke(*base, "--max-tokens", "5", env={"LSD_RUN_MAX_TOKENS": "3"})
    assert json.loads(overridden.stdout)["stats"]["generated_tokens"] == 5  # flags win


def test_shell_completion_offers_registry_models():
    from click.shell_completion import ShellComplete

    complete = ShellComplete(cli, {}, "lsd", "_LSD_COMPLETE")

    def names(args, incomplete):
        return [item.value for item in complete.get_completions(args, incomplete)
                if item.type == "plain"]

    assert "qwen2.5-coder-1.5b" in names(["run"], "qwen2.5-coder-1")
    assert names(["run"], "qwen2.5-coder-1") == sorted(names(["run"], "qwen2.5-coder-1"))
    assert names(["run", "qwen2.5-coder-1.5b"], "wri") == []  # the second argument: a prompt
    assert "qwen2.5-coder-0.5b" in names(["chat", "-m"], "qwen2.5-coder-0")
    assert "qwen2.5-coder-1.5b" in names(["pull"], "qwen")
    assert "--max-tokens" in names(["run"], "--max-t")


def test_environment_variables_that_must_not_act(tiny_pair):
    """LSD_VERSION (a build script's) must not hijack --version; a stop string with a space
    from the environment is not split into two (such options read no environment)."""
    result = invoke("models", env={"LSD_VERSION": "0.3.0"})
    assert result.exit_code == 0 and "NAME" in result.stdout, result.output
    run = invoke("run", "-m", tiny_pair[0], "--raw", "the cat", "--max-tokens", "3",
                 env={"LSD_RUN_STOP": "the cat", "LSD_RUN_JSON": "1"})
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["stats"]["generated_tokens"] == 3  # no stop from the env
    named = invoke("run", "--raw", "the cat", "--max-tokens", "2", "--json",
                   env={"LSD_MODEL": str(tiny_pair[0])})
    assert named.exit_code == 0 and json.loads(named.stdout)["stats"]["generated_tokens"] == 2
