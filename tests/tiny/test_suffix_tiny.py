"""The suffix index on real llama.cpp (tiny models): an answer asked for again is drafted
from the index and strict output stays plain greedy decoding's; the index survives the
process with remember (0600, per vocabulary), LSD_NO_STATE and suffix_tokens=0 keep
nothing, a damaged file is a notice; `lsd rm --cache` deletes it."""

from __future__ import annotations

import os
import stat

import pytest
from click.testing import CliRunner
from test_auto_tiny import flat_verification
from tinymodels import TINY_CTX, load_tiny

from lsd_local import Engine
from lsd_local.cli import cli

PROMPTS = ["the cat is", "def f(x): return", "in the end it is"]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("LSD_NO_STATE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "lsd"


def suffix_files(cache_dir):
    folder = cache_dir / "suffix"
    return sorted(folder.iterdir()) if folder.is_dir() else []


@pytest.mark.parametrize("drafter,k", [("lookup", 8), ("auto", None)])
def test_an_answer_asked_for_again_is_drafted_from_the_index(tiny_pair, plain, drafter, k):
    with load_tiny(tiny_pair, drafter, k=k) as eng:
        if drafter == "auto":  # (measured tiny-model timings alone may make plain steps best)
            flat_verification(eng, pinned=True)
        for prompt in PROMPTS:
            greedy = plain.generate(prompt, max_tokens=60).run().tokens
            first = eng.generate(prompt, max_tokens=60).run()
            eng.reset()  # (a new conversation: nothing of the first is in the context)
            again = eng.generate(prompt, max_tokens=60).run()
            assert first.tokens == again.tokens == greedy, prompt
            # (an answer that copies its prompt whole is drafted from the context as well:
            # lookup keeps a copy that the whole answer is part of)
            by_source = again.stats.accepted_by_source
            assert by_source.get("suffix", 0) > 0, again.stats.mix()
            assert by_source.get("suffix", 0) + by_source.get("lookup", 0) >= 40
            assert again.stats.rounds < first.stats.rounds / 2


def test_without_an_index_nothing_is_drafted_from_past_requests(tiny_pair):
    with load_tiny(tiny_pair, "lookup", k=8, suffix_tokens=0) as eng:
        assert eng.suffix_index is None
        for _ in range(2):
            gen = eng.generate(PROMPTS[0], max_tokens=40).run()
            assert "suffix" not in gen.stats.drafted_by_source


def test_the_index_survives_the_process_with_remember(tiny_pair, cache_dir):
    with load_tiny(tiny_pair, "lookup", k=8, remember=True) as first:
        want = first.generate(PROMPTS[1], max_tokens=60).run().tokens
    (path,) = suffix_files(cache_dir)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with load_tiny(tiny_pair, "lookup", k=8, remember=True) as second:
        gen = second.generate(PROMPTS[1], max_tokens=60).run()
        assert gen.tokens == want and gen.stats.accepted_by_source.get("suffix", 0) >= 40
    with load_tiny(tiny_pair, "lookup", k=8) as forgetful:  # remember=False: not loaded
        gen = forgetful.generate(PROMPTS[1], max_tokens=60).run()
        assert "suffix" not in gen.stats.drafted_by_source


def test_no_state_keeps_nothing_and_a_damaged_file_is_a_notice(tiny_pair, cache_dir,
                                                                monkeypatch):
    monkeypatch.setenv("LSD_NO_STATE", "1")
    with load_tiny(tiny_pair, "lookup", k=8, remember=True) as eng:
        eng.generate(PROMPTS[0], max_tokens=20).run()
    assert suffix_files(cache_dir) == []
    monkeypatch.delenv("LSD_NO_STATE")
    with load_tiny(tiny_pair, "lookup", k=8, remember=True) as eng:
        eng.generate(PROMPTS[0], max_tokens=20).run()
    (path,) = suffix_files(cache_dir)
    path.write_bytes(path.read_bytes()[:-2])
    with load_tiny(tiny_pair, "lookup", k=8, remember=True) as eng:
        assert any("ignoring the suffix index" in n and "cut short" in n for n in eng.notices)
        gen = eng.generate(PROMPTS[0], max_tokens=20).run()
        assert gen.finish_reason in ("stop", "length")
    assert suffix_files(cache_dir) == [path]  # written whole again on close


def test_cli_keeps_the_index_and_rm_cache_deletes_it(tiny_pair, cache_dir):
    runner = CliRunner()
    args = ["run", str(tiny_pair[0]), "--raw", "--max-tokens", "12", "--ctx", str(TINY_CTX)]
    result = runner.invoke(cli, [*args, "--fresh", PROMPTS[0]])
    assert result.exit_code == 0, result.output
    assert suffix_files(cache_dir) == []  # --fresh: nothing kept
    result = runner.invoke(cli, [*args, PROMPTS[0]])
    assert result.exit_code == 0, result.output
    assert len(suffix_files(cache_dir)) == 1
    result = runner.invoke(cli, ["rm", "--cache"])
    assert result.exit_code == 0 and "removed" in result.output and "suffix" in result.output
    assert "stop it first" in result.output  # a running process would save it again
    assert suffix_files(cache_dir) == []
    result = runner.invoke(cli, ["rm", "--cache"])
    assert result.exit_code == 0 and "nothing kept" in result.output
    result = runner.invoke(cli, ["rm"])
    assert result.exit_code != 0 and "give a model NAME or --cache" in result.output


def test_library_engine_can_swap_indexes(tiny_pair):
    from lsd_local.drafters.suffixstore import SuffixIndex

    with Engine.load(tiny_pair[0], drafter="lookup", k=8, n_ctx=TINY_CTX) as eng:
        mine = SuffixIndex(1 << 12)
        eng.suffix_index = mine
        eng.generate(PROMPTS[2], max_tokens=30).run()
        assert mine.total > 30
        eng.suffix_index = SuffixIndex(1 << 12)  # an empty one: the answer is not there
        eng.reset()
        gen = eng.generate(PROMPTS[2], max_tokens=30).run()
        assert "suffix" not in gen.stats.drafted_by_source
