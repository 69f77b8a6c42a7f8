"""Grammar-constrained generation on real llama.cpp with tiny generated models: the shipped
grammars, every rule and drafter, sampling, errors, the CLI and the bench."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from grammar_examples import EXAMPLES
from tinymodels import load_tiny

from lsd_local.backend import Grammar
from lsd_local.cli import cli
from lsd_local.errors import GrammarError, ParameterError
from lsd_local.grammars import shipped_grammars

PROMPTS = ["the cat is", "def f(x): return", "a b a b a b", "in the end it is"]
# Bounded (strings, arrays and integers have a maximum length), so every answer of a random
# tiny model completes well within max_tokens and must parse.
SCHEMA = {"type": "object",
          "properties": {"id": {"type": "integer"},
                         "name": {"type": "string", "maxLength": 6},
                         "ok": {"type": "boolean"},
                         "tags": {"type": "array", "items": {"type": "string", "maxLength": 3},
                                  "maxItems": 3}},
          "required": ["id", "name", "ok", "tags"]}


# Two bullet lines of printable ASCII: most draft tokens are allowed, so loose rules get to
# keep mismatches under it (under SCHEMA nearly every draft token is forbidden).
TWO_LINES = 'root ::= "- " [ -~]{1,40} "\\n" "- " [ -~]{1,40} "\\n"'
TWO_LINES_RE = re.compile(r"- [ -~]{1,40}\n- [ -~]{1,40}\n")


def check_schema_answer(text: str) -> None:
    """Independent of the grammar: json.loads and the schema's types and bounds."""
    value = json.loads(text)
    assert set(value) == {"id", "name", "ok", "tags"}, text
    assert isinstance(value["id"], int) and isinstance(value["ok"], bool)
    assert isinstance(value["tags"], list) and len(value["tags"]) <= 3
    for string, most in [(value["name"], 6)] + [(tag, 3) for tag in value["tags"]]:
        assert isinstance(string, str)
        # llama.cpp's grammar counts an invalid UTF-8 byte (a random model's sampled byte
        # tokens make some) differently from Python's decoder: bound only well-formed text
        assert len(string) <= most or "\ufffd" in string, text


def byte_tokens(text: str) -> list[int]:
    """The tiny vocabulary spells any text with its byte tokens <0x00>.. (ids 3..258), so the
    grammar sees exactly these characters, whatever the tokenizer would merge."""
    return [3 + b for b in text.encode("utf-8")]


def accepts(grammar: Grammar, eos: int, text: str) -> bool:
    state = grammar.clone()
    try:
        for token in byte_tokens(text):
            if not state.allows(token):
                return False
            state.accept(token)
        return state.allows(eos)  # complete: the grammar lets the answer end here
    finally:
        state.close()


def test_every_shipped_grammar_has_examples_and_a_header():
    assert set(shipped_grammars()) == set(EXAMPLES)
    for path in shipped_grammars().values():
        assert path.read_text().startswith("# "), f"{path.name} needs a comment header"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_shipped_grammar_accepts_its_examples_and_rejects_the_rest(plain, name):
    good, bad = EXAMPLES[name]
    grammar = plain.compile_grammar(name)
    eos = plain.target.vocab.eos_token
    for text in good:
        assert accepts(grammar, eos, text), (name, text)
        if name.startswith("json"):
            json.loads(text)  # the examples themselves are what json.loads takes
        if name == "arithmetic":
            expression = text.split("=")[0].replace("^", "**")
            compile(expression, "<example>", "eval")
    for text in bad:
        assert not accepts(grammar, eos, text), (name, text)
    grammar.close()


@pytest.mark.parametrize("drafter", ["lookup", "model", "multilevel"])
def test_constrained_strict_equals_constrained_greedy(tiny_pair, plain, drafter):
    constraints = [{"json_schema": SCHEMA}, {"grammar": "json"}, {"grammar": "arithmetic"},
                   {"grammar": "list"}, {"grammar": TWO_LINES}]
    with load_tiny(tiny_pair, drafter, k=4) as eng:
        drafted = 0
        for constraint in constraints:
            for prompt in PROMPTS:
                want = plain.generate(prompt, max_tokens=60, **constraint).run().tokens
                gen = eng.generate(prompt, max_tokens=60, **constraint).run()
                assert gen.tokens == want, (drafter, constraint, prompt)
                drafted += gen.stats.drafted
        assert drafted > 0


@pytest.mark.parametrize("rule,params", [("strict", {}), ("fly", {"theta": 0.0, "window": 1}),
                                         ("fly", {"theta": 0.0, "window": 1,
                                                  "entropy": "normalized"}),
                                         ("asd", {"gate": 100.0, "budget": 1e4})])
def test_every_rule_and_drafter_gives_valid_output(tiny_pair, rule, params):
    n_loose = 0
    for drafter in ("lookup", "model", "multilevel"):
        with load_tiny(tiny_pair, drafter, k=4, rule=rule, **params) as eng:
            for prompt in PROMPTS:
                gen = eng.generate(prompt, max_tokens=200, json_schema=SCHEMA).run()
                assert gen.finish_reason == "stop"
                check_schema_answer(gen.text)
                gen = eng.generate(prompt, max_tokens=200, grammar=TWO_LINES).run()
                assert gen.finish_reason == "stop" and TWO_LINES_RE.fullmatch(gen.text), gen.text
                n_loose += gen.stats.accepted_loose
    assert (n_loose > 0) == (rule != "strict")  # the loose paths ran under the grammar


@pytest.mark.parametrize("rule,entropy", [("strict", "topk"), ("fly", "topk"),
                                          ("fly", "normalized")])
def test_sampling_gives_valid_json_for_many_seeds(tiny_pair, rule, entropy):
    with load_tiny(tiny_pair, "model", k=3, rule=rule, theta=0.0, entropy=entropy) as eng:
        for seed in range(12):
            gen = eng.generate(PROMPTS[seed % 4], max_tokens=200, temperature=1.0, seed=seed,
                               top_k=int(seed % 3) * 20, json_schema=SCHEMA).run()
            check_schema_answer(gen.text)


def test_a_schema_whose_keys_and_values_hold_quotes_backslashes_and_accents(plain):
    """A JSON schema may name a key `a "b"`, `c\\d` or `名前` and an enum `say "hi"` or
    `café`: the grammar compiles (llama-cpp-python's converter left the backslash of JSON's
    `\\"` unescaped in a literal, a grammar llama.cpp refused) and holds the answer to
    exactly those, accents written as themselves (as JSON allows, and llama.cpp's converter
    writes them), not as `\\u00e9`."""
    schema = {"type": "object", "properties": {
        'a "b"': {"enum": ['say "hi"', "x\\y", "café"]}, "c\\d": {"type": "boolean"},
        "名前": {"const": "é"}},
        "required": ['a "b"', "c\\d", "名前"], "additionalProperties": False}
    for seed in range(4):
        gen = plain.generate(PROMPTS[seed], max_tokens=80, json_schema=schema, seed=seed,
                             temperature=1.0).run()
        answer = json.loads(gen.text)
        assert set(answer) == {'a "b"', "c\\d", "名前"} and answer["名前"] == "é"
        assert answer['a "b"'] in ('say "hi"', "x\\y", "café")
        assert "\\u" not in gen.text


@pytest.mark.parametrize("number, refused_at", [
    ("1e-07", None), ("-2.5E+300", None), ("0.125e0", None), ("7e0012", None), ("0", None),
    ("01", "0"), ("1e", "1e"), ("1e-12345", "1e-1234"), ("1.", "1.")])
def test_a_schema_number_is_json_s_number(plain, number, refused_at):
    """A number in a JSON schema's grammar is what JSON calls one: an exponent may start
    with 0 (Python writes 1e-07; llama-cpp-python's converter refused it), a number may not
    (01), and an exponent or a fraction needs a digit. Spelled a byte at a time through
    llama.cpp's grammar engine; `refused_at`: the prefix after which the text's next
    character, or the close, is refused."""
    from lsd_local.backend.grammar import schema_to_gbnf

    schema = {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"],
              "additionalProperties": False}
    grammar = Grammar.compile(plain.target, schema_to_gbnf(schema))
    spell = plain.target.vocab.byte_tokens()
    try:
        fed = '{"x":'
        for char in fed:
            grammar.accept(spell[ord(char)])
        for char in number + "}":
            if refused_at is not None and fed == '{"x":' + refused_at:
                assert not grammar.allows(spell[ord(char)]), fed + char
                return
            assert grammar.allows(spell[ord(char)]), fed + char
            grammar.accept(spell[ord(char)])
            fed += char
        assert refused_at is None
    finally:
        grammar.close()


def test_multibyte_literal_is_exact(plain, tiny_pair):
    grammar = 'root ::= "héllo wörld ✓ " [0-9] "\\n"'
    with load_tiny(tiny_pair, "lookup", k=8) as eng:
        for engine in (plain, eng):
            gen = engine.generate("the cat is", max_tokens=40, grammar=grammar).run()
            assert gen.finish_reason == "stop"
            assert gen.text[:-2] == "héllo wörld ✓ " and gen.text[-2].isdigit()


def test_grammar_state_is_per_request(plain):
    first = plain.generate("the cat is", max_tokens=30, json_schema=SCHEMA).run()
    second = plain.generate("the cat is", max_tokens=30, json_schema=SCHEMA).run()
    assert first.tokens == second.tokens


@pytest.mark.parametrize("kwargs,error,message", [
    ({"grammar": "nosuch"}, GrammarError, "unknown grammar 'nosuch'.*json_object"),
    ({"grammar": 'root ::= "a" |\nb ::= [x-'}, GrammarError, "line 2, column 3"),
    ({"grammar": 'x ::= "a"'}, GrammarError, "does not contain a 'root'"),
    ({"grammar": "root ::= undefined"}, GrammarError, "Undefined rule identifier 'undefined'"),
    ({"json_schema": '{"type": "object",\n "properties": }'}, GrammarError, "line 2, column 16"),
    ({"json_schema": {"type": "frobnicate"}}, GrammarError, "cannot convert JSON schema"),
    ({"json_schema": "/no/such/schema.json"}, GrammarError, "not found"),
    ({"grammar": "json", "json_schema": SCHEMA}, ParameterError, "not both"),
])
def test_invalid_grammars_are_clear_errors(plain, kwargs, error, message):
    with pytest.raises(error, match=message):
        plain.generate("the cat is", max_tokens=5, **kwargs)
    assert plain.generate("the cat is", max_tokens=3).run().tokens  # still usable


def invoke(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


@pytest.mark.parametrize("entropy", ["topk", "normalized"])
def test_cli_run_with_a_json_schema_and_a_grammar_file(tiny_pair, tmp_path, entropy):
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    result = invoke("run", tiny_pair[0], "the cat is", "--raw", "--json-schema", schema,
                    "--max-tokens", 200, "--rule", "fly", "--theta", 0, "--entropy", entropy)
    assert result.exit_code == 0, result.output
    check_schema_answer(result.stdout.strip())
    grammar = tmp_path / "yes.gbnf"
    grammar.write_text('# yes or no\nroot ::= ("yes" | "no") "."\n')
    result = invoke("run", tiny_pair[0], "the cat is", "--raw", "--grammar", grammar)
    assert result.exit_code == 0 and result.stdout.strip() in ("yes.", "no.")


def test_cli_grammar_errors_are_one_line(tiny_pair, tmp_path):
    bad = tmp_path / "bad.gbnf"
    bad.write_text('root ::= "a" |\nb ::= [x-')
    result = invoke("run", tiny_pair[0], "hi", "--grammar", bad)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"invalid grammar file {bad}: line 2, column 3" in result.output
    result = invoke("run", tiny_pair[0], "hi", "--grammar", "nosuch")
    assert result.exit_code == 1 and "shipped grammar (arithmetic, json," in result.output
    result = invoke("chat", tiny_pair[0], "--grammar", bad, input="hello\n")
    assert result.exit_code == 1 and "line 2, column 3" in result.output


def test_bench_reports_grammar_configs_side_by_side(tiny_pair, tmp_path):
    prompts = tmp_path / "j.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"j{i}", "checker": {"json": True},
                                           "messages": [{"role": "user", "content": p}]}) + "\n"
                               for i, p in enumerate(PROMPTS)))
    out = tmp_path / "res.json"
    result = CliRunner().invoke(cli, [
        "bench", str(tiny_pair[0]), "--prompts", str(prompts), "--max-tokens", "40",
        "--configs", "plain,plain:grammar=json,strict:lookup:4:grammar=json,fly:lookup:4",
        "--grammar", "arithmetic", "--no-cost", "--json", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    runs = {r["config"]: r for r in data["runs"] if r["id"] == "j0"}
    assert runs["plain"]["constrain_s"] > 0  # --grammar reached the configs without one
    assert runs["strict:lookup:4:grammar=json"]["tokens"] == runs["plain:grammar=json"]["tokens"]
    summaries = {s["config"]: s for s in data["summaries"]}
    assert all(0 < s["grammar_share"] < 1 for s in summaries.values())
    assert "grammar" in result.output
    assert all(r["check"] in ("valid JSON", "not JSON") for r in data["runs"])


def test_rows_are_settled_without_full_masks(plain, monkeypatch):
    """Best-first checks settle rows; a full-vocabulary mask (20-55 ms on Qwen) stays rare."""
    calls = {"mask": 0, "allows": 0}
    real_mask, real_allows = Grammar.mask, Grammar.allows

    def mask(self, row):
        calls["mask"] += 1
        return real_mask(self, row)

    def allows(self, token):
        calls["allows"] += 1
        return real_allows(self, token)

    monkeypatch.setattr(Grammar, "mask", mask)
    monkeypatch.setattr(Grammar, "allows", allows)
    rows = 0
    for prompt in PROMPTS:
        gen = plain.generate(prompt, max_tokens=200, json_schema=SCHEMA).run()
        rows += gen.stats.rounds
    assert calls["allows"] > rows  # every row was checked...
    assert calls["mask"] <= 0.1 * rows, (calls, rows)  # ...and almost none needed a full mask
