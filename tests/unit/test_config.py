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
    from lsd_local import Engine
    from lsd_local.cli import cli

    assert default(Engine.load, "n_ctx") == config.N_CTX
    assert default(Engine.generate, "max_tokens") == config.MAX_TOKENS
    assert default(Engine.generate, "top_p") == config.TOP_P
    run = {p.name: p.default for p in cli.commands["run"].params}
    assert run["theta"] == config.FLY_THETA and run["gate"] == config.ASD_GATE
    assert run["max_tokens"] == config.CLI_MAX_TOKENS and run["top_k"] == config.TOP_K
    assert cli.commands["bench"].params[[p.name for p in cli.commands["bench"].params]
                                        .index("max_tokens")].default == config.MAX_TOKENS
