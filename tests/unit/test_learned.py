"""The learned file (learned.json): what survives, what is ignored (with a notice), and that
processes saving at once never leave a damaged file."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest

from lsd_local.drafters.auto import learned


def test_entries_round_trip_and_the_newest_win(tmp_path):
    path = tmp_path / "lsd" / "learned.json"
    learned.save(path, {"c1": {"x": 1}}, {"a1": {"y": 2}})
    learned.save(path, {"c1": {"x": 3}, "c2": {"x": 4}}, {})
    sections = learned.load(path)
    assert sections == {"costs": {"c1": {"x": 3}, "c2": {"x": 4}}, "acceptance": {"a1": {"y": 2}}}


def test_the_oldest_entries_go_first(tmp_path, monkeypatch):
    monkeypatch.setattr(learned, "MAX_ENTRIES", 3)
    path = tmp_path / "learned.json"
    for i in range(5):
        learned.save(path, {f"c{i}": i}, {})
    assert list(learned.load(path)["costs"]) == ["c2", "c3", "c4"]


@pytest.mark.parametrize(("content", "words"), [
    ("{not json", "cannot be read"),
    (json.dumps({"format": learned.FORMAT + 1, "costs": {}, "acceptance": {}}),
     "another format"),
    (json.dumps(["a", "list"]), "another format"),
    (json.dumps({"format": learned.FORMAT, "costs": [], "acceptance": {}}), "damaged"),
])
def test_a_bad_file_is_ignored_with_a_notice_and_replaced_on_save(tmp_path, content, words):
    path = tmp_path / "learned.json"
    path.write_text(content)
    notices = []
    assert learned.load(path, notices.append) == {"costs": {}, "acceptance": {}}
    assert len(notices) == 1 and words in notices[0] and str(path) in notices[0]
    learned.save(path, {"c": 1}, {})
    assert learned.load(path)["costs"] == {"c": 1}


def _hammer(path: str, worker: int) -> None:
    for i in range(40):
        learned.save(learned.Path(path), {f"w{worker}-{i}": [worker] * 50}, {})


def test_processes_saving_at_once_never_damage_the_file(tmp_path):
    path = tmp_path / "learned.json"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_hammer, args=(str(path), w)) for w in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    notices = []
    sections = learned.load(path, notices.append)
    assert not notices and sections["costs"]  # whole JSON; some updates may be lost
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".learned-")]


def test_a_changed_model_file_has_another_identity(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 5000)
    first = learned.file_identity(model)
    assert learned.file_identity(model) == first
    model.write_bytes(b"GGUF" + b"\1" * 5000)  # same size, other bytes
    os.utime(model, ns=(1, 1))
    assert learned.file_identity(model) != first


def test_the_cache_dir_and_the_switch(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert learned.learned_path() == tmp_path / "lsd" / "learned.json"
    for value, off in (("1", True), ("yes", True), ("0", False), ("", False)):
        monkeypatch.setenv("LSD_NO_STATE", value)
        assert learned.disabled() is off


def test_request_families_name_the_instruction_not_the_content():
    ask = "Summarize the following text in three sentences.\n\n"
    one = [{"role": "user", "content": ask + "The cat sat on the mat."}]
    two = [{"role": "user", "content": ask + "A mutex guards shared state."}]
    family = learned.request_family(one)
    assert family == learned.request_family(two)  # same instruction, other text
    assert family == learned.request_family(  # later turns of the conversation too
        [*one, {"role": "assistant", "content": "It sat."}, {"role": "user", "content": "Why?"}])
    assert family != learned.request_family(
        [{"role": "user", "content": "Add type hints to this function.\n\ndef f(x): ..."}])
    with_system = [{"role": "system", "content": "You are terse."}, *one]
    assert learned.request_family(with_system) != family  # the system prompt counts
    assert learned.request_family("\n  Translate to French:\nhello") == \
        learned.request_family("Translate to French:\ngoodbye")  # raw prompts: first line
    assert learned.request_family("Translate to French:") != learned.request_family("Hi")
    assert learned.request_family([]) == learned.request_family([{"role": "user"}])
    assert "Summarize" not in family and len(family) == 16  # a hash: no prompt text saved
