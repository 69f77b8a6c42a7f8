"""Chat: templates (messages, tools, template kwargs -> prompt), tool-call formats and
their grammars (tools.py), and reading an answer apart into reasoning, content and tool
calls as it streams (output.py)."""
