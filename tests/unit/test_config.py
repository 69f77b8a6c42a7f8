"""Settings validate themselves when made, and the raw verifier API, the Engine and the CLI
take their defaults from the one config module."""

from __future__ import annotations

import inspect

import pytest

from lsd_local import config
from lsd_local.config import DrafterConfig, RuleConfig, SamplerSettings, sampler_settings
from lsd_local.errors import ParameterError
from lsd_local.verify import asd, fly, speculative_sample


@pytest.mark.parametrize("make,name", [
    (lambda: RuleConfig(rule="bogus"), "rule"),
    (lambda: RuleConfig(theta=-1.0), "theta"),
    (lambda: RuleConfig(window=0), "window"),
    (lambda: RuleConfig(entropy="full"), "entropy"),
    (lambda: RuleConfig(budget=-2.0), "budget"),
    (lambda: DrafterConfig(drafter="psychic"), "drafter"),
    (lambda: DrafterConfig(k=0), "k"),
    (lambda: DrafterConfig(min_ngram=9, max_ngram=4), "min_ngram"),
    (lambda: SamplerSettings(temperature=0.0), "temperature"),
    (lambda: SamplerSettings(temperature=1.0, top_p=0.0), "top_p"),
    (lambda: sampler_settings(0.0, top_k=-1), "top_k"),
    (lambda: RuleConfig().with_changes(tau=1.0), "unknown parameter"),
])
def test_invalid_settings_are_refused_when_made(make, name):
    with pytest.raises(ParameterError, match=name):
        make()


def test_with_changes_keeps_the_rest_and_greedy_has_no_sampler():
    rule = RuleConfig(rule="fly", theta=0.2).with_changes(window=3)
    assert (rule.rule, rule.theta, rule.window, rule.gate) == ("fly", 0.2, 3, config.ASD_GATE)
    assert sampler_settings(0.0) is None
    assert sampler_settings(0.7).temperature == 0.7


def default(func, name):
    return inspect.signature(func).parameters[name].default


def test_the_raw_verifiers_default_to_the_tuned_rule_settings():
    rule = RuleConfig()
    assert default(fly, "theta") == rule.theta == config.FLY_THETA
    assert default(fly, "entropy_top_k") == rule.entropy_top_k
    assert default(fly, "entropy") == rule.entropy
    assert default(speculative_sample, "entropy_top_k") == rule.entropy_top_k
    assert (default(asd, "gate"), default(asd, "max_exceptions"), default(asd, "budget")) == (
        rule.gate, rule.max_exceptions, rule.budget)


def test_the_engine_and_the_cli_share_the_defaults():
    from lsd_local.cli import cli
    from lsd_local.request import Request

    assert config.engine_settings().load.n_ctx == config.N_CTX  # Engine.load's
    assert default(Request, "max_tokens") == config.MAX_TOKENS  # what Engine.generate builds
    assert default(Request, "top_p") == config.TOP_P
    assert config.engine_settings().load.n_seq == 1  # side by side: opt in
    run = config.engine_settings(parallel=3)
    assert run.load.n_seq == run.draft_load.n_seq == 3  # a draft sequence per target one
    run = {p.name: p.default for p in cli.commands["run"].params}
    assert run["theta"] == config.FLY_THETA and run["gate"] == config.ASD_GATE
    assert run["max_tokens"] == config.CLI_MAX_TOKENS and run["top_k"] == config.TOP_K
    assert cli.commands["bench"].params[[p.name for p in cli.commands["bench"].params]
                                        .index("max_tokens")].default == config.MAX_TOKENS


def test_engine_settings_route_each_keyword_to_its_settings():
    """Engine.load's keyword conveniences are built into typed settings in one place."""
    s = config.engine_settings(k=6, p_min=0.5, theta=0.1, budget=2.0,
                               n_ctx=512, n_threads=3, device="none", draft_n_gpu_layers=0,
                               no_repack=True, rpc="a:1, b:2", remember=True)
    assert (s.drafter.drafter, s.drafter.k, s.drafter.p_min) == ("auto", 6, 0.5)
    assert (s.rule.rule, s.rule.theta, s.rule.budget) == ("strict", 0.1, 2.0)
    assert (s.load.n_ctx, s.load.n_threads, s.load.devices, s.load.no_repack) == (
        512, 3, "none", True)
    assert s.draft_load.n_gpu_layers == 0 and s.load.n_gpu_layers == "auto"
    assert s.draft_load.n_ctx == 512 and not s.draft_device_given
    assert s.rpc == ("a:1", "b:2") and s.remember
    assert config.engine_settings().drafter.drafter == config.DEFAULT_DRAFTER == "auto"
    assert config.engine_settings(has_draft=True).drafter.drafter == "auto"  # (accepted)
    given = config.engine_settings(draft_device="CPU")
    assert given.draft_load.devices == "CPU" and given.draft_device_given
    typed = config.engine_settings(drafter=config.DrafterConfig("none"),
                                   rule=config.RuleConfig("fly"), theta=0.2)
    assert typed.drafter.drafter == "none" and (typed.rule.rule, typed.rule.theta) == ("fly", 0.2)
    assert config.engine_settings(k=600).load.n_batch == 601  # a whole block


@pytest.mark.parametrize("keywords,param", [({"colour": 3}, "colour"), ({"k": 0}, "k"),
                                            ({"n_ctx": 2}, "n_ctx"), ({"theta": -1}, "theta")])
def test_engine_settings_refuse_what_they_do_not_know(keywords, param):
    with pytest.raises(config.ParameterError) as caught:
        config.engine_settings(**keywords)
    assert caught.value.param == param


def test_engine_settings_take_any_sequence_and_empty_values_as_unset():
    s = config.engine_settings(tensor_split=(x for x in (3.0, 1.0)),
                               device="CPU", draft_device="")
    assert s.load.tensor_split == (3.0, 1.0) and s.draft_load.tensor_split == (3.0, 1.0)
    assert s.draft_load.devices == "CPU" and not s.draft_device_given  # "" = as the target
    assert config.engine_settings(tensor_split=[]).load.tensor_split is None


def test_changed_settings_keep_what_is_not_named():
    d, r = config.DrafterConfig("lookup", k=8), config.RuleConfig("fly", theta=0.2)
    assert config.changed_settings(d, r, rule="") == (d, r)  # chat's bare /mode
    d2, r2 = config.changed_settings(d, r, "model", k=None, window=None, theta=0.3)
    assert (d2.drafter, d2.k, r2.rule, r2.theta, r2.window) == ("model", None, "fly", 0.3, None)


def test_one_stop_string_is_one_stop_and_odd_stops_are_a_clear_error():
    """`stop="END"` (OpenAI's `stop` may be one string) stops at END, not at E, N or D."""
    from lsd_local.errors import ParameterError
    from lsd_local.request import Request

    assert Request("x", stop="END").stop == ("END",)
    assert Request("x", stop=["a", "b"]).stop == ["a", "b"]
    Request("x", stop="END").check()
    for bad in ([1], b"x", {"a": 1}):
        with pytest.raises(ParameterError, match="stop"):
            Request("x", stop=bad).check()
