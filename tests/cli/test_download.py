"""Downloads against a local fake Hub (tests/fakehub.py): resume after a lost connection or
Ctrl-C, checksums, a server that ignores Range, full disk, offline, unreachable Hub."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakehub import COMMIT, FakeHub

from lsd_local.cli import cli
from lsd_local.errors import LsdError
from lsd_local.models import hub
from lsd_local.models.registry import ModelSpec

DATA = bytes(range(256)) * 4096  # 1 MiB
REPO, FILE = "lsd-test/tiny-GGUF", "model.gguf"


@pytest.fixture()
def fake_hub(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(hub, "RETRY_PAUSE_S", 0.0)  # retries without waiting
    with FakeHub({f"{REPO}/{FILE}": DATA}) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        yield server


def spec(sha256: str | None = None) -> ModelSpec:
    return ModelSpec("tiny", REPO, FILE, sha256=sha256)


def partials(tmp_path: Path) -> list[Path]:
    return list((tmp_path / "cache").rglob(f"*{hub.PARTIAL_SUFFIX}"))


def test_download_lands_in_the_hub_cache_layout(fake_hub, tmp_path):
    path = hub.download(spec(hashlib.sha256(DATA).hexdigest()))
    assert path.read_bytes() == DATA
    assert path.parent.name == COMMIT and path.is_symlink()
    assert hub.cached_file(spec()) == path  # huggingface_hub finds it where it would put it
    n = len(fake_hub.requests)
    assert hub.download(spec()) == path and len(fake_hub.requests) == n  # no network again


def test_a_dropped_connection_is_resumed_within_the_run(fake_hub, tmp_path):
    fake_hub.drops = [400_000, 400_000]
    path = hub.download(spec(hashlib.sha256(DATA).hexdigest()))
    assert path.read_bytes() == DATA and not partials(tmp_path)
    assert fake_hub.gets() == [None, "bytes=400000-", "bytes=800000-"]


def test_a_lost_connection_keeps_the_partial_file_and_the_next_run_resumes(fake_hub,
                                                                           tmp_path):
    # some progress, then RETRIES + 1 attempts in a row that bring nothing
    fake_hub.drops = [100_000] + [0] * (hub.RETRIES + 1)
    with pytest.raises(LsdError, match="interrupted.*MiB kept, the same command resumes"):
        hub.download(spec())
    [partial] = partials(tmp_path)
    kept = 100_000
    assert len(fake_hub.gets()) == hub.RETRIES + 2
    assert partial.stat().st_size == kept
    assert hub.cached_file(spec()) is None  # no half-written model where a model goes
    path = hub.download(spec(hashlib.sha256(DATA).hexdigest()))
    assert path.read_bytes() == DATA and not partials(tmp_path)
    assert fake_hub.gets()[-1] == f"bytes={kept}-"


def test_two_downloads_of_one_file_take_turns(fake_hub, tmp_path, monkeypatch):
    """Two `lsd pull`s at once: the second waits for the first at the partial file's lock
    and finds the blob complete (before, both appended to the same partial file and the
    checksum then deleted it)."""
    at_lock = threading.Event()
    lock = hub.WeakFileLock

    def announced_lock(path):  # the second download is about to take the lock
        if threading.current_thread().name == "second":
            at_lock.set()
        return lock(path)

    monkeypatch.setattr(hub, "WeakFileLock", announced_lock)
    fake_hub.hook = (300_000, lambda: None)  # the first download stops mid-file ...
    results: dict[str, Path] = {}
    first = threading.Thread(target=lambda: results.update(a=hub.download(spec())))
    second = threading.Thread(target=lambda: results.update(b=hub.download(spec())),
                              name="second")
    first.start()
    wait_for(lambda: len(fake_hub.gets()) == 1)
    second.start()
    assert at_lock.wait(60)
    fake_hub.hold.set()  # ... and goes on once the second one waits at the lock
    first.join(60)
    second.join(60)
    assert results["a"] == results["b"] and results["a"].read_bytes() == DATA
    assert fake_hub.gets() == [None]  # one download, not two appending to one file


def wait_for(condition, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)  # polling a condition, not waiting a guessed time


def test_ctrl_c_during_a_download_then_resume_through_lsd_pull(fake_hub, tmp_path, monkeypatch):
    config = tmp_path / "config" / "lsd"
    config.mkdir(parents=True)
    (config / "models.toml").write_text(f'[tiny]\nrepo = "{REPO}"\nfile = "{FILE}"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    # once 300 kB are sent the hub holds the rest back; when the client has written them, a
    # real SIGINT reaches its main thread (interrupting the blocked read): mid-file, always
    main = threading.main_thread().ident

    def ctrl_c_when_written() -> None:
        deadline = time.monotonic() + 60
        while sum(p.stat().st_size for p in partials(tmp_path)) < 300_000:
            assert time.monotonic() < deadline, "the client never wrote what it was sent"
            time.sleep(0.01)  # polling a condition, not waiting a guessed time
        signal.pthread_kill(main, signal.SIGINT)

    fake_hub.hook = (300_000, ctrl_c_when_written)
    # a background runner (nohup, `cmd &` in a script) starts Python with SIGINT ignored, and
    # Python keeps it ignored: give this Ctrl-C the handler an interactive run has
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        result = CliRunner().invoke(cli, ["pull", "tiny"])
    finally:
        signal.signal(signal.SIGINT, previous)
        fake_hub.hold.set()
    assert result.exit_code == 130 and "Interrupted." in result.output
    [partial] = partials(tmp_path)
    kept = partial.stat().st_size
    assert 0 < kept < len(DATA) and hub.cached_file(spec()) is None
    result = CliRunner().invoke(cli, ["pull", "tiny"])
    assert result.exit_code == 0, result.output
    assert Path(result.stdout.strip().splitlines()[-1]).read_bytes() == DATA
    assert fake_hub.gets()[-1] == f"bytes={kept}-"


def test_server_ignoring_range_restarts_cleanly(fake_hub, tmp_path):
    fake_hub.drops, fake_hub.ignore_range = [300_000], True
    path = hub.download(spec())
    assert path.read_bytes() == DATA  # not 300 kB of it twice
    assert fake_hub.gets() == [None, "bytes=300000-"]  # asked to resume, got it all again


def test_a_hub_file_that_changed_since_it_was_pinned_is_named_before_downloading(fake_hub,
                                                                                 tmp_path):
    with pytest.raises(LsdError, match="changed on the Hub since the registry pinned it"):
        hub.download(spec("0" * 64))
    assert fake_hub.gets() == [] and hub.cached_file(spec()) is None  # nothing downloaded


def test_checksum_mismatch_deletes_the_download(fake_hub, tmp_path):
    """Bytes that arrive damaged (the Hub's etag is right, what came is not)."""
    fake_hub.damage_body = True
    with pytest.raises(LsdError, match="sha256 mismatch .* deleted"):
        hub.download(spec(hashlib.sha256(DATA).hexdigest()))
    assert not list((tmp_path / "cache").rglob("blobs/*")) and hub.cached_file(spec()) is None


def test_not_enough_disk_space_fails_before_downloading(fake_hub, monkeypatch):
    real = hub.shutil.disk_usage
    monkeypatch.setattr(hub.shutil, "disk_usage",
                        lambda p: real(p)._replace(free=1000))  # the OS reports a full disk
    with pytest.raises(LsdError, match="not enough disk space.*1 MiB more needed"):
        hub.download(spec())
    assert fake_hub.gets() == []


def test_a_write_error_keeps_what_was_written(fake_hub, tmp_path):
    """A real write failure: the file size limit (RLIMIT_FSIZE) stops the write at 200 kB the
    way a full disk would, in a child process."""
    code = (
        "import resource, signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.RLIM_INFINITY))\n"
        "from lsd_local.models import hub\nfrom lsd_local.errors import LsdError\n"
        "from lsd_local.models.registry import ModelSpec\n"
        f"try:\n    hub.download(ModelSpec('t', {REPO!r}, {FILE!r}))\n"
        "except LsdError as e:\n    print('LSDERROR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=os.environ.copy(), timeout=60)
    assert "LSDERROR download of model.gguf" in out.stdout, out.stdout + out.stderr
    assert "File too large" in out.stdout and "the same command resumes" in out.stdout
    [partial] = partials(tmp_path)
    assert 0 < partial.stat().st_size <= 200_000
    assert hub.download(spec()).read_bytes() == DATA  # and it resumes from there


def test_offline_and_unreachable_hub_are_one_line_errors(fake_hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(LsdError, match="not in the Hugging Face cache and HF_HUB_OFFLINE=1"):
        hub.download(spec())
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(LsdError, match="cannot reach the Hugging Face Hub"):
        hub.download(spec())


def test_unknown_file_is_named(fake_hub):
    with pytest.raises(LsdError, match="nothing.gguf not found in lsd-test/tiny-GGUF"):
        hub.download(ModelSpec("x", REPO, "nothing.gguf"))


@pytest.mark.parametrize("gets_only", [False, True])
def test_the_token_never_leaves_the_hub_host(fake_hub, monkeypatch, gets_only):
    """The Hub redirects LFS downloads to a CDN with a signed URL: the user's token goes to
    the Hub only (as huggingface_hub does), whether the redirect comes with the metadata
    (HEAD) or with the download itself (GET)."""
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
    with FakeHub({f"{REPO}/{FILE}": DATA}, host="127.0.0.2") as cdn:
        fake_hub.redirect_to, fake_hub.redirect_gets_only = cdn.endpoint, gets_only
        path = hub.download(spec(hashlib.sha256(DATA).hexdigest()))
    assert path.read_bytes() == DATA
    assert ("HEAD", "Bearer hf_secret_token") in fake_hub.auth  # the Hub got the token
    if gets_only:  # the Hub's own GET too, before its redirect
        assert ("GET", "Bearer hf_secret_token") in fake_hub.auth
    assert cdn.auth and all(token is None for _, token in cdn.auth), cdn.auth


def test_lsd_rm_removes_a_downloaded_model_through_the_cache_api(fake_hub, tmp_path,
                                                                  monkeypatch):
    config = tmp_path / "config" / "lsd"
    config.mkdir(parents=True)
    size = len(DATA)
    (config / "models.toml").write_text(
        f'[tiny]\nrepo = "{REPO}"\nfile = "{FILE}"\nsize = {size}\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    listed = CliRunner().invoke(cli, ["models"])
    row = next(line for line in listed.stdout.splitlines() if line.startswith("tiny "))
    assert "0.00 GB" in row and row.rstrip().endswith("no")  # the registry's size, not cached
    assert CliRunner().invoke(cli, ["pull", "tiny"]).exit_code == 0
    assert CliRunner().invoke(cli, ["models"]).stdout.count(" yes") >= 1
    removed = CliRunner().invoke(cli, ["rm", "tiny"])
    assert removed.exit_code == 0, removed.output
    assert "removed tiny" in removed.stdout and "1.0M" in removed.stdout
    assert hub.cached_file(spec()) is None
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()
                and not p.name.endswith(".lock")]  # blob and snapshot gone
    again = CliRunner().invoke(cli, ["rm", "tiny"])
    assert again.exit_code == 1 and "tiny is not downloaded" in again.output


HUB_REPO = "org/m-GGUF"
HUB_FILES = ["m-Q4_K_M.gguf", "m-Q8_0.gguf", "m-Q2_K-00001-of-00002.gguf",
             "m-Q2_K-00002-of-00002.gguf", "mmproj-m-f16.gguf", "README.md"]


@pytest.fixture()
def hub_repo(fake_hub):
    for name in HUB_FILES:
        fake_hub.files[f"{HUB_REPO}/{name}"] = name.encode() * 1000
    return fake_hub


@pytest.mark.parametrize("name,expected", [
    (HUB_REPO, ["m-Q4_K_M.gguf"]),  # the default tag
    (f"hf.co/{HUB_REPO}:q8_0", ["m-Q8_0.gguf"]),  # tags match case-insensitively
    (f"{HUB_REPO}:Q2_K", ["m-Q2_K-00001-of-00002.gguf", "m-Q2_K-00002-of-00002.gguf"]),
])
def test_lsd_pull_any_hub_gguf_by_name(hub_repo, name, expected):
    result = CliRunner().invoke(cli, ["pull", name])
    assert result.exit_code == 0, result.output
    paths = [Path(line) for line in result.stdout.split()]
    assert [p.name for p in paths] == expected
    assert all(p.read_bytes() == p.name.encode() * 1000 for p in paths)


@pytest.mark.parametrize("name,message", [
    (f"{HUB_REPO}:Q5_K_M", "no Q5_K_M file in org/m-GGUF; it has: m-Q2_K-NNNNN-of-00002.gguf, "
                           "m-Q4_K_M.gguf, m-Q8_0.gguf"),
    ("org/missing-GGUF", "repository org/missing-GGUF not found"),
])
def test_hub_names_that_do_not_resolve_are_one_line_errors(hub_repo, name, message):
    result = CliRunner().invoke(cli, ["pull", name])
    assert result.exit_code == 1 and message in result.output, result.output
    assert "Traceback" not in result.output


def test_several_files_for_one_tag_are_listed(hub_repo):
    hub_repo.files[f"{HUB_REPO}/m-imat-Q4_K_M.gguf"] = b"x"
    result = CliRunner().invoke(cli, ["pull", HUB_REPO])
    assert result.exit_code == 1
    assert "several files in org/m-GGUF match Q4_K_M: m-Q4_K_M.gguf, m-imat-Q4_K_M.gguf" in (
        result.output)


def test_lsd_run_a_hub_name_then_offline(fake_hub, tiny_pair, monkeypatch):
    """End to end with a real (tiny) GGUF behind a Hub name; once pulled, the same name works
    with HF_HUB_OFFLINE=1 (resolved from the cache)."""
    fake_hub.files["org/tiny-GGUF/tiny-Q4_K_M.gguf"] = tiny_pair[0].read_bytes()
    args = ["run", "org/tiny-GGUF:Q4_K_M", "--raw", "the cat", "--max-tokens", "4", "--json"]
    online = CliRunner().invoke(cli, args)
    assert online.exit_code == 0, online.output
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    n_requests = len(fake_hub.requests)
    offline = CliRunner().invoke(cli, args)
    assert offline.exit_code == 0, offline.output
    assert json.loads(offline.stdout)["text"] == json.loads(online.stdout)["text"]
    assert len(fake_hub.requests) == n_requests  # nothing asked of the Hub


def test_a_xet_backed_file_says_which_path_is_used(fake_hub, tmp_path):
    pytest.importorskip("hf_xet")
    notices: list[str] = []
    hub.download(spec(), notices.append)
    assert notices == []  # a plain LFS file: nothing to explain
    fake_hub.xet = True
    other = ModelSpec("tiny", REPO, "other.gguf")
    fake_hub.files[f"{REPO}/other.gguf"] = DATA[:1000]
    assert hub.download(other, notices.append).read_bytes() == DATA[:1000]
    assert len(notices) == 1 and "stored with Xet; lsd fetches it over HTTP" in notices[0]


def blob_partial(tmp_path: Path) -> Path:
    blobs = tmp_path / "cache" / f"models--{REPO.replace('/', '--')}" / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    return blobs / (hashlib.sha256(DATA).hexdigest() + hub.PARTIAL_SUFFIX)


def test_a_partial_file_longer_than_the_model_starts_over(fake_hub, tmp_path):
    blob_partial(tmp_path).write_bytes(DATA + b"appended twice")
    assert hub.download(spec()).read_bytes() == DATA
    assert fake_hub.gets() == [None]


def test_a_complete_partial_file_is_finished_without_a_body(fake_hub, tmp_path):
    """A run killed between the last byte and the rename: the server answers 416."""
    blob_partial(tmp_path).write_bytes(DATA)
    assert hub.download(spec()).read_bytes() == DATA
    assert fake_hub.gets() == [f"bytes={len(DATA)}-"]


def test_an_expired_download_url_is_asked_for_again(fake_hub):
    fake_hub.refusals = [403]
    assert hub.download(spec()).read_bytes() == DATA
    heads = [r for r in fake_hub.requests if r[0] == "HEAD"]
    assert len(heads) == 2 and len(fake_hub.gets()) == 2  # fresh metadata before the retry


def test_lsd_rm_a_split_hub_model_removes_all_its_parts(hub_repo, tmp_path):
    name = f"{HUB_REPO}:Q2_K"
    assert CliRunner().invoke(cli, ["pull", name]).exit_code == 0
    removed = CliRunner().invoke(cli, ["rm", name])
    assert removed.exit_code == 0, removed.output
    assert "m-Q2_K-00001-of-00002.gguf, m-Q2_K-00002-of-00002.gguf" in removed.stdout
    assert not list((tmp_path / "cache").rglob("*.gguf"))


def test_the_parts_of_a_split_model_come_from_one_commit(hub_repo):
    """main moves to a new commit while part 1 downloads: part 2 still comes from part 1's
    commit, into the same snapshot folder, where llama.cpp looks for it."""
    hub_repo.hold.set()  # the hook below must not hold the download back
    hub_repo.hook = (1, lambda: setattr(hub_repo, "commit", "c" * 40))
    result = CliRunner().invoke(cli, ["pull", f"{HUB_REPO}:Q2_K"])
    assert result.exit_code == 0, result.output
    first, second = (Path(line) for line in result.stdout.split())
    assert first.parent == second.parent and first.parent.name == COMMIT
    assert hub_repo.commit == "c" * 40  # main did move


def test_a_registry_entry_may_pin_a_revision(fake_hub, tmp_path):
    pinned = ModelSpec("tiny", REPO, FILE, revision="d" * 40)
    path = hub.download(pinned)
    assert path.parent.name == "d" * 40 and path.read_bytes() == DATA
    assert hub.cached_file(pinned) == path
    assert hub.cached_file(spec()) is None  # main was not moved to the pinned commit


def test_lsd_models_asks_the_hub_for_sizes_it_lacks(fake_hub, tmp_path, monkeypatch):
    config = tmp_path / "config" / "lsd"
    config.mkdir(parents=True)
    (config / "models.toml").write_text(
        f'[tiny]\nrepo = "{REPO}"\nfile = "{FILE}"\n\n[gone]\nrepo = "{REPO}"\nfile = "x.gguf"\n')
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))

    def row(output: str, name: str) -> str:
        return next(line for line in output.splitlines() if line.startswith(name + " "))

    plain = CliRunner().invoke(cli, ["models"]).stdout
    assert " ? " in row(plain, "tiny") and not fake_hub.requests  # no network by default
    sized = CliRunner().invoke(cli, ["models", "--hub-sizes"])
    assert sized.exit_code == 0, sized.output
    assert f"{len(DATA) / 1e9:.2f} GB" in row(sized.stdout, "tiny")
    assert " ? " in row(sized.stdout, "gone")  # the Hub has no such file: still unknown


def test_an_etag_that_is_no_file_name_is_refused(fake_hub, tmp_path):
    """The etag becomes a path in the cache: a hostile endpoint must not walk out of it."""
    fake_hub.etag = "../../../outside"
    with pytest.raises(LsdError, match="no file name"):
        hub.download(spec())
    assert fake_hub.gets() == [] and not (tmp_path / "outside").exists()
