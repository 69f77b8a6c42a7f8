"""The tools a request gives (OpenAI's `tools` and `tool_choice`), checked: what a call may
name and what its arguments must be (chat/tools.py reads calls in a template's format)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ParameterError


@dataclass(frozen=True)
class Tool:
    """One function the model may call."""

    name: str
    description: str
    parameters: dict  # JSON schema of its arguments object

    def spec(self) -> dict:
        """The OpenAI function specification (what templates render)."""
        return {"type": "function", "function": {"name": self.name,
                                                 "description": self.description,
                                                 "parameters": self.parameters}}


def parse_tools(tools: object) -> tuple[Tool, ...]:
    """OpenAI `tools` (a list of {"type": "function", "function": {...}}) checked: a
    ParameterError names what is wrong (param "tools")."""
    if not isinstance(tools, (list, tuple)) or not tools:
        raise ParameterError("invalid tools: a non-empty list of function specifications",
                             param="tools")
    out, seen = [], set()
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type", "function") != "function" or \
                not isinstance(function, dict):
            raise ParameterError(f"invalid tools[{i}]: expected {{\"type\": \"function\", "
                                 "\"function\": {...}}", param="tools")
        name = function.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", name):
            raise ParameterError(f"invalid tools[{i}].function.name: {name!r} (1-64 letters, "
                                 "digits, _ . -)", param="tools")
        if name in seen:
            raise ParameterError(f"invalid tools[{i}]: the name {name!r} is used twice",
                                 param="tools")
        seen.add(name)
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, dict) or parameters.get("type", "object") != "object" \
                or not isinstance(parameters.get("properties", {}), dict):
            raise ParameterError(f"invalid tools[{i}].function.parameters: a JSON schema of "
                                 "type object (its properties an object)", param="tools")
        out.append(Tool(name, str(function.get("description") or ""), parameters))
    return tuple(out)


def choose_tools(tools: tuple[Tool, ...], tool_choice: object) -> tuple[str, tuple[Tool, ...]]:
    """("auto" | "required" | "none", the tools a call may name) for OpenAI's tool_choice:
    "auto", "none", "required", or {"type": "function", "function": {"name": ...}}."""
    if tool_choice in (None, "auto", "none", "required"):
        return tool_choice or "auto", tools
    function = tool_choice.get("function") if isinstance(tool_choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    named = [tool for tool in tools if tool.name == name]
    if not named:
        raise ParameterError(f"invalid tool_choice: {tool_choice!r} (auto, none, required, or "
                             "a function among the tools)", param="tool_choice")
    return "required", tuple(named)
