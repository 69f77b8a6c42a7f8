"""Prompt sets for `lsd bench`: the JSONL files shipped in bench/ or a user's own.

One JSON object per line:

    {"id": "HumanEval/0",                       # unique within the file
     "messages": [{"role": "user", "content": "..."}],   # rendered with the chat template
     "split": "dev" | "test",                   # optional; default: test
     "max_tokens": 256,                         # optional; overrides --max-tokens
     "checker": {"humaneval": "HumanEval/0"}}   # optional; scores the answer (pass@1)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LsdError
from ..models.resources import data_path

BUILTIN_SETS = ("humaneval", "code-edit", "chat", "summarize")
# shipped, not run by default: structured output (see --grammar), and the workloads where
# drafting from the grammar and from past requests pays, and a copy task that checks the
# profile's ceiling (bench/make_workload_sets.py)
EXTRA_SETS = ("json", "json-extract", "agents-repeat", "edits-multiturn", "six-edits", "copy")
SPLITS = ("dev", "test", "all")


@dataclass(frozen=True)
class PromptItem:
    """One prompt of a set."""

    set_name: str
    id: str
    messages: tuple[dict, ...]
    split: str = "test"
    max_tokens: int | None = None
    checker: dict = field(default_factory=dict)
    json_schema: dict | None = None  # the answer is constrained to it (JSON extraction)
    tools: tuple[dict, ...] = ()  # OpenAI tools offered (an agent's turn), with tool_choice
    tool_choice: str | None = None
    # items of one sequence run in file order and each configuration's suffix index keeps
    # what the earlier ones answered (an agent or an editor repeating itself); elsewhere
    # every run starts with an empty index (a repeat never copies its own earlier answer)
    sequence: str | None = None


def shipped_sets_dir() -> Path | None:
    """The bench/ folder of prompt sets that ships with lsd."""
    return data_path("bench")


def resolve_set(name: str) -> tuple[str, Path]:
    """(set name, file) for a built-in set name or a path to a JSONL file."""
    if name in BUILTIN_SETS + EXTRA_SETS:
        folder = shipped_sets_dir()
        if folder is None:
            raise LsdError(f"the built-in prompt set {name!r} is not installed (bench/*.jsonl); "
                           "pass a JSONL file instead")
        return name, folder / f"{name}.jsonl"
    path = Path(name).expanduser()
    if not path.is_file():
        raise LsdError(f"no prompt set {name!r}: neither a built-in set "
                       f"({', '.join(BUILTIN_SETS + EXTRA_SETS)}) nor a JSONL file")
    return path.stem, path


def load_set(name: str, split: str = "test", limit: int | None = None) -> list[PromptItem]:
    """The prompts of one set in file order, restricted to a split and the first `limit`."""
    if split not in SPLITS:
        raise LsdError(f"invalid split {split!r} (choose one of {', '.join(SPLITS)})")
    set_name, path = resolve_set(name)
    items = parse_jsonl(set_name, path)
    chosen = [item for item in items if split == "all" or item.split == split]
    if not chosen:
        raise LsdError(f"{path}: no prompts in the {split!r} split")
    return chosen[:limit] if limit else chosen


def parse_jsonl(set_name: str, path: Path) -> list[PromptItem]:
    """Parse and validate a prompt file; errors name the file and line."""
    items: list[PromptItem] = []
    seen: set[str] = set()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise LsdError(f"cannot read prompt set {path}: {exc}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = _item(set_name, json.loads(line))
        except KeyError as exc:
            raise LsdError(f"{path}:{number}: missing field {exc}") from None
        except (ValueError, TypeError) as exc:
            raise LsdError(f"{path}:{number}: {exc}") from None
        if item.id in seen:
            raise LsdError(f"{path}:{number}: duplicate id {item.id!r}")
        seen.add(item.id)
        items.append(item)
    return items


def _item(set_name: str, row: dict) -> PromptItem:
    if not isinstance(row, dict):
        raise ValueError("each line must be a JSON object")
    messages = row["messages"]
    if not (isinstance(messages, list) and messages and all(
            isinstance(m, dict) and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str) for m in messages)):
        raise ValueError('"messages" must be a non-empty list of {"role", "content"} strings')
    split = row.get("split", "test")
    if split not in ("dev", "test"):
        raise ValueError(f'"split" must be "dev" or "test", not {split!r}')
    max_tokens = row.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError('"max_tokens" must be a positive integer')
    checker = row.get("checker") or {}
    if not isinstance(checker, dict) or set(checker) - {"humaneval", "json"}:
        raise ValueError(f'unknown checker {checker!r} (known: "humaneval", "json")')
    schema, tools, choice, sequence = (row.get("json_schema"), row.get("tools") or [],
                                       row.get("tool_choice"), row.get("sequence"))
    if schema is not None and not isinstance(schema, dict):
        raise ValueError('"json_schema" must be a JSON schema object')
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise ValueError('"tools" must be a list of OpenAI tool objects')
    if choice is not None and choice not in ("auto", "required", "none"):
        raise ValueError('"tool_choice" must be "auto", "required" or "none"')
    if sequence is not None and not isinstance(sequence, str):
        raise ValueError('"sequence" must be a string')
    return PromptItem(set_name, str(row["id"]), tuple(messages), split, max_tokens, checker,
                      schema, tuple(tools), choice, sequence)
