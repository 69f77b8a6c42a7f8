"""A small GBNF reader: which characters a grammar lets come next, so that text it forces
(a JSON key, a tool's name, `", "arguments": {"`) can be drafted without any model.

Only a drafter uses it: llama.cpp's grammar still decides what may be committed, so a
mistake here costs a rejected draft token, never a wrong answer. The grammar is parsed into
alternatives of elements (character sets and rule references; literals, groups and
repetitions become helper rules, as llama.cpp does), and a state is a set of stacks of
(rule, alternative, position) frames whose tops are character sets (llama.cpp's stacks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_STACKS = 256  # a state wider than this stops telling what is forced (it is ambiguous)


@dataclass(frozen=True)
class Chars:
    """A character set: ranges of code points, or their complement."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False

    def __contains__(self, char: str) -> bool:
        code = ord(char)
        inside = any(lo <= code <= hi for lo, hi in self.ranges)
        return inside != self.negated

    @property
    def single(self) -> str | None:
        """The one character this set holds, or None."""
        if not self.negated and len(self.ranges) == 1 and self.ranges[0][0] == \
                self.ranges[0][1]:
            return chr(self.ranges[0][0])
        return None


class GrammarSyntaxError(ValueError):
    """Text this reader does not understand (the grammar is then only llama.cpp's)."""


_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]",
            "-": "-", "/": "/", "^": "^"}


class _Parser:
    """GBNF text -> rules: name -> list of alternatives, each a list of elements (a Chars
    or a rule name)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.rules: dict[str, list[list]] = {}
        self._helpers = 0

    def parse(self) -> dict[str, list[list]]:
        while True:
            self._space(newlines=True)
            if self.i >= len(self.text):
                return self.rules
            name = self._name()
            self._space()
            if not self.text.startswith("::=", self.i):
                raise GrammarSyntaxError(f"expected ::= after {name!r}")
            self.i += 3
            self._space(newlines=True)
            self.rules[name] = self._alternatives()

    def _space(self, newlines: bool = False) -> None:
        while self.i < len(self.text):
            ch = self.text[self.i]
            if ch == "#":
                while self.i < len(self.text) and self.text[self.i] != "\n":
                    self.i += 1
            elif ch in " \t\r" or (newlines and ch == "\n"):
                self.i += 1
            else:
                return

    def _name(self) -> str:
        found = re.compile(r"[A-Za-z0-9_-]+").match(self.text, self.i)
        if not found:
            raise GrammarSyntaxError(f"expected a rule name at {self.i}")
        self.i = found.end()
        return found.group()

    def _alternatives(self, nested: bool = False) -> list[list]:
        alternatives = [self._sequence(nested)]
        while self.i < len(self.text) and self.text[self.i] == "|":
            self.i += 1
            self._space(newlines=True)
            alternatives.append(self._sequence(nested))
        return alternatives

    def _sequence(self, nested: bool) -> list:
        items: list = []
        while True:
            self._space(newlines=nested)
            if self.i >= len(self.text) or self.text[self.i] in "|)\n":
                return items
            element = self._primary(nested)
            items.extend(self._repeated(element))

    def _primary(self, nested: bool) -> list:
        ch = self.text[self.i]
        if ch == '"':
            return [Chars(((ord(c), ord(c)),)) for c in self._literal()]
        if ch == "[":
            return [self._class()]
        if ch == "(":
            self.i += 1
            alternatives = self._alternatives(nested=True)
            self._space(newlines=True)
            if self.i >= len(self.text) or self.text[self.i] != ")":
                raise GrammarSyntaxError("unclosed (")
            self.i += 1
            return [self._helper(alternatives)]
        if ch == ".":
            self.i += 1
            return [Chars((), negated=True)]
        return [self._name()]

    def _helper(self, alternatives: list[list]) -> str:
        self._helpers += 1
        name = f"\0{self._helpers}"  # cannot clash with a GBNF name
        self.rules[name] = alternatives
        return name

    def _repeated(self, element: list) -> list:
        """The element with its postfix operator (*, +, ?, {m}, {m,}, {m,n}) applied."""
        if self.i >= len(self.text):
            return element
        op = self.text[self.i]
        if op in "*+?":
            self.i += 1
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[op]
        elif op == "{":
            found = re.compile(r"\{\s*(\d+)\s*(,\s*(\d*)\s*)?\}").match(self.text, self.i)
            if not found:
                raise GrammarSyntaxError(f"bad repetition at {self.i}")
            self.i = found.end()
            low = int(found.group(1))
            high = low if found.group(2) is None else (int(found.group(3))
                                                      if found.group(3) else None)
        else:
            return element
        return self._repeat(element, low, high)

    def _repeat(self, element: list, low: int, high: int | None) -> list:
        out = element * low
        if high is None:  # R ::= element R | (nothing)
            name = self._helper([])
            self.rules[name] = [element + [name], []]
            return out + [name]
        tail: list = []
        for _ in range(high - low):  # nested optionals: (element (element ...)?)?
            tail = [self._helper([element + tail, []])]
        return out + tail

    def _literal(self) -> str:
        self.i += 1
        out = []
        while self.i < len(self.text) and self.text[self.i] != '"':
            out.append(self._char())
        if self.i >= len(self.text):
            raise GrammarSyntaxError("unclosed string")
        self.i += 1
        return "".join(out)

    def _char(self) -> str:
        ch = self.text[self.i]
        if ch != "\\":
            self.i += 1
            return ch
        kind = self.text[self.i + 1]
        if kind in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[kind]
            value = int(self.text[self.i + 2:self.i + 2 + width], 16)
            self.i += 2 + width
            return chr(value)
        self.i += 2
        return _ESCAPES.get(kind, kind)

    def _class(self) -> Chars:
        self.i += 1
        negated = self.text.startswith("^", self.i)
        self.i += negated
        ranges = []
        while self.i < len(self.text) and self.text[self.i] != "]":
            lo = self._char()
            hi = lo
            if self.text.startswith("-", self.i) and not self.text.startswith("-]", self.i):
                self.i += 1
                hi = self._char()
            ranges.append((ord(lo), ord(hi)))
        if self.i >= len(self.text):
            raise GrammarSyntaxError("unclosed [")
        self.i += 1
        return Chars(tuple(ranges), negated)


def parse_gbnf(text: str) -> dict[str, list[list]]:
    """GBNF text -> rules (GrammarSyntaxError for what this reader does not understand, a
    rule it names but does not define, or left recursion, which llama.cpp refuses too)."""
    rules = _Parser(text).parse()
    for alternatives in rules.values():
        for element in (e for alt in alternatives for e in alt if isinstance(e, str)):
            if element not in rules:
                raise GrammarSyntaxError(f"undefined rule {element!r}")
    nullable = _nullable(rules)
    for name in rules:
        if _starts_with(rules, nullable, name, name, set()):
            raise GrammarSyntaxError(f"rule {name!r} is left recursive")
    return rules


def _nullable(rules: dict[str, list[list]]) -> set[str]:
    """The rules that can match no text."""
    found: set[str] = set()
    grew = True
    while grew:
        grew = False
        for name, alternatives in rules.items():
            if name not in found and any(all(isinstance(e, str) and e in found for e in alt)
                                         for alt in alternatives):
                found.add(name)
                grew = True
    return found


def _starts_with(rules: dict[str, list[list]], nullable: set[str], name: str, target: str,
                 seen: set[str]) -> bool:
    """Whether rule `name` can call `target` before matching any character."""
    for alt in rules[name]:
        for element in alt:
            if not isinstance(element, str):
                break
            if element == target:
                return True
            if element not in seen:
                seen.add(element)
                if _starts_with(rules, nullable, element, target, seen):
                    return True
            if element not in nullable:
                break
    return False


Stack = tuple  # of (rule, alternative, position) frames, the top last


class GrammarState:
    """Where a grammar stands after some text: its stacks, each topped by the character set
    it expects next (an empty stack: the grammar may end here)."""

    def __init__(self, rules: dict[str, list[list]], stacks: frozenset) -> None:
        self.rules = rules
        self.stacks = stacks

    @classmethod
    def start(cls, rules: dict[str, list[list]], root: str = "root") -> GrammarState:
        if root not in rules:
            raise GrammarSyntaxError(f"no rule {root!r}")
        return cls(rules, _expand_all(rules, [((root, a, 0),)
                                               for a in range(len(rules[root]))]))

    @property
    def dead(self) -> bool:
        """No text can follow (the text went where this reader did not expect)."""
        return not self.stacks

    def accept(self, text: str) -> GrammarState:
        """The state after `text` (dead if the grammar does not allow it)."""
        stacks = self.stacks
        for char in text:
            moved = []
            for stack in stacks:
                if stack:
                    rule, alt, pos = stack[-1]
                    if char in self.rules[rule][alt][pos]:
                        moved.append(stack[:-1] + ((rule, alt, pos + 1),))
            stacks = _expand_all(self.rules, moved)
            if not stacks or len(stacks) > MAX_STACKS:
                return GrammarState(self.rules, frozenset())
        return GrammarState(self.rules, stacks)

    def forced(self, limit: int, spacing: dict[str, str] | None = None,
               before: str = "") -> str:
        """The text every way on from here begins with (at most `limit` characters). Where
        the grammar leaves whitespace optional, `spacing` says what the writer puts after a
        character (e.g. {":": " ", "}": "", "": ""; "": at the start); it stops there when
        the character before is not in it, where two characters other than optional
        whitespace are possible, and where the grammar may end. `before`: the text so far
        (its last character and the whitespace after it matter)."""
        out, state, spacing = [], self, spacing or {}
        habit = _habit(spacing, before)
        while len(out) < limit and state.stacks and () not in state.stacks:
            char = state._next(habit)
            if char is None:
                break
            out.append(char)
            state = state.accept(char)
            habit = habit[1:] if habit and char == habit[0] else \
                None if char.isspace() else spacing.get(char)
        return "".join(out)

    def _next(self, habit: str | None) -> str | None:
        """The next character, if only one is possible, or one besides optional whitespace:
        there `habit` (the whitespace usually written here; None: not known) decides."""
        tops = [self.rules[r][a][p] for r, a, p in (stack[-1] for stack in self.stacks)]
        singles = {t.single for t in tops}
        if len(singles) == 1 and None not in singles:
            return singles.pop()
        blanks = [t for t in tops if _blank(t)]
        solid = {t.single for t in tops if not _blank(t)}
        if not blanks or len(solid) > 1 or None in solid or habit is None:
            return None
        if habit:  # the habit, or nothing when the grammar does not allow it
            return habit[0] if any(habit[0] in t for t in blanks) else None
        return solid.pop() if solid else None


_BLANKS = (9, 10, 13, 32)


def _habit(spacing: dict[str, str], before: str) -> str | None:
    """The whitespace still to come after `before`: what `spacing` says follows its last
    other character, less what was already written (None: not known)."""
    solid = before.rstrip(" \t\r\n")
    written = before[len(solid):]
    habit = spacing.get(solid[-1:])
    if habit is None or not habit.startswith(written):
        return None
    return habit[len(written):]


def _blank(chars: Chars) -> bool:
    """A set of whitespace characters only."""
    return not chars.negated and all(lo in _BLANKS and hi in _BLANKS and (lo == hi or all(
        c in _BLANKS for c in range(lo, hi + 1))) for lo, hi in chars.ranges)


def _expand_all(rules: dict[str, list[list]], stacks: list) -> frozenset:
    out: set = set()
    for stack in stacks:
        _expand(rules, stack, out, set())
    return frozenset(out)


def _expand(rules: dict[str, list[list]], stack: Stack, out: set, seen: set) -> None:
    """Add the stacks `stack` leads to whose tops are character sets (or that are empty)."""
    if stack in seen:  # a cycle of rules that match nothing
        return
    seen.add(stack)
    while stack and stack[-1][2] == len(rules[stack[-1][0]][stack[-1][1]]):
        stack = stack[:-1]  # a finished sequence: its caller goes on
    if not stack:
        out.add(())
        return
    rule, alt, pos = stack[-1]
    element = rules[rule][alt][pos]
    if isinstance(element, Chars):
        out.add(stack)
        return
    caller = stack[:-1]
    if pos + 1 < len(rules[rule][alt]):  # (a call in last place returns nowhere: dropped)
        caller = caller + ((rule, alt, pos + 1),)
    for index in range(len(rules[element])):
        _expand(rules, caller + ((element, index, 0),), out, seen)
