"""Jinja tags that chat templates use beyond Jinja's own (imported when a template is
compiled, so that nothing imports jinja2 before a chat is rendered)."""

from __future__ import annotations

from jinja2 import nodes
from jinja2.ext import Extension


class GenerationTag(Extension):
    """transformers' `{% generation %}...{% endgeneration %}` (it marks the assistant's
    tokens for training masks; LFM2.5's and other templates use it): rendered as its body,
    in a scope of its own, as transformers renders it."""

    tags = {"generation"}

    def parse(self, parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller) -> str:
        return caller()
