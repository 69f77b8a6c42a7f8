"""What `--drafter auto` learned, kept between processes: the target's verification cost per
batch size and the draft model's cost per token (keyed by what they depend on: the model
files, threads, placement and the llama.cpp build), and the acceptance statistics per
drafter (keyed by the model pair, the rule and the drafter's settings; lookup's per copy run
and request family, lookup_acceptance.py). A script that runs `lsd run` once per request
then starts where the last one stopped instead of spending its first rounds
measuring.

One JSON file under the user cache dir ($XDG_CACHE_HOME/lsd or ~/.cache/lsd), written
whole to a temporary file and renamed over the old one: two processes saving at once may
lose one's update, never corrupt the file. A file that cannot be read, or comes from
another format version, is ignored with a one-line notice. The learned values keep moving
as before (exponential forgetting), so a machine under other load is noticed within a few
rounds. LSD_NO_STATE=1 (or `--fresh`) starts empty and saves nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ...config import lsd_cache_dir

FORMAT = 1  # bump when the layout of an entry changes: older files are then ignored
MAX_ENTRIES = 64  # per section; the least recently saved go first
HEADER_BYTES = 1 << 20  # a model file's identity hashes its first MiB (header, metadata)


def learned_path() -> Path:
    """Where what auto learned is kept."""
    return lsd_cache_dir() / "learned.json"


def disabled() -> bool:
    """LSD_NO_STATE set to anything but 0/empty: start empty, save nothing."""
    return os.environ.get("LSD_NO_STATE", "") not in ("", "0")


def file_identity(path: str | os.PathLike) -> str:
    """A model file's identity: size, modification time and a hash of its first MiB (never
    a hash of the whole file: it may be many GB)."""
    stat = os.stat(path)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(HEADER_BYTES))
    return f"{stat.st_size}-{stat.st_mtime_ns}-{digest.hexdigest()[:16]}"


def request_family(prompt: str | Sequence[dict]) -> str:
    """A name for the kind of request, under which lookup acceptance is also learned: the
    instruction a script or an editor repeats with each request, i.e. the system messages
    and the first line of the first user message (the first line of a raw prompt), hashed
    (the learned file holds no prompt text). Requests that share it usually share how their
    answers copy (code re-emitted whole, a summary quoting phrases); one-off chat questions
    each get their own and fall back on what all requests taught."""
    if isinstance(prompt, str):
        parts = [_first_line(prompt)]
    else:
        messages = [m for m in prompt if isinstance(m, dict)]
        parts = [str(m.get("content", "")) for m in messages if m.get("role") == "system"]
        users = [m for m in messages if m.get("role") == "user"]
        parts.append(_first_line(str(users[0].get("content", ""))) if users else "")
    return key_of("family", *parts)[:16]


def _first_line(text: str) -> str:
    """The first non-blank line, stripped."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def key_of(*parts) -> str:
    """A short stable key for a tuple of JSON-able parts."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def load(path: Path, notify=None) -> dict:
    """The saved sections ({"costs": {...}, "acceptance": {...}}), or empty ones when the
    file is missing, unreadable or of another format (then `notify` hears why)."""
    empty = {"costs": {}, "acceptance": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return empty
    except (OSError, ValueError) as exc:
        if notify is not None:
            notify(f"ignoring what auto learned in {path}: it cannot be read ({exc})")
        return empty
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        if notify is not None:
            notify(f"ignoring what auto learned in {path}: another format (lsd version)")
        return empty
    sections = {name: data.get(name) for name in empty}
    if not all(isinstance(section, dict) for section in sections.values()):
        if notify is not None:
            notify(f"ignoring what auto learned in {path}: it is damaged")
        return empty
    return sections


def save(path: Path, costs: dict, acceptance: dict) -> None:
    """Merge these entries into the file (the newest last; MAX_ENTRIES per section), written
    to a temporary file and renamed into place."""
    sections = load(path)
    for name, fresh in (("costs", costs), ("acceptance", acceptance)):
        merged = sections[name]
        for key, value in fresh.items():
            merged.pop(key, None)
            merged[key] = value
        sections[name] = dict(list(merged.items())[-MAX_ENTRIES:])
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".learned-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"format": FORMAT, **sections}, f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class LearnedStore:
    """An engine's link to the file: restores what auto drafters learned for these models
    and saves it back. Drafters without learned statistics (lookup, model) are passed
    over."""

    def __init__(self, path: Path, cost_key: str, pair_key: str, notify=None) -> None:
        self.path = path
        self.cost_key = cost_key  # target, draft, threads, placement, llama.cpp build
        self.pair_key = pair_key  # target and draft files
        self.sections = load(path, notify)

    def acceptance_key(self, drafter_config, rule: str) -> str:
        """Acceptance depends on the model pair, the rule and the drafter's settings (not on
        the machine)."""
        return key_of(self.pair_key, rule, repr(drafter_config))

    def restore(self, drafter, drafter_config, rule: str) -> None:
        if hasattr(drafter, "restore"):
            drafter.restore(self.sections["costs"].get(self.cost_key),
                            self.sections["acceptance"].get(
                                self.acceptance_key(drafter_config, rule)))

    def save(self, drafters: dict, rule: str) -> None:
        """Save what every auto drafter learned (OSError when the cache dir is not writable)."""
        costs, acceptance = {}, {}
        for drafter_config, drafter in drafters.items():
            if hasattr(drafter, "learned_costs"):
                costs[self.cost_key] = drafter.learned_costs()
                acceptance[self.acceptance_key(drafter_config, rule)] = \
                    drafter.learned_acceptance()
        if costs:
            save(self.path, costs, acceptance)
            self.sections["costs"].update(costs)
            self.sections["acceptance"].update(acceptance)
