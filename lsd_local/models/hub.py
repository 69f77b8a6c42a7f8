"""Downloads from the Hugging Face Hub into its standard cache (resumable), with checksums."""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import os
import re
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from huggingface_hub.utils import WeakFileLock

from ..errors import LsdError
from .registry import ModelSpec


def offline() -> bool:
    """HF_HUB_OFFLINE read at call time (huggingface_hub reads it once, at import)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def cache_dir() -> Path | None:
    """The Hub cache folder from the environment, or None for huggingface_hub's default."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]) / "hub"
    return None


def cached_file(spec: ModelSpec) -> Path | None:
    """Path of the spec's file in the Hub cache, or None when it is not downloaded."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(spec.repo, spec.file, cache_dir=cache_dir(),
                                   revision=spec.revision)
    return Path(found) if isinstance(found, str) and Path(found).is_file() else None


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


PARTIAL_SUFFIX = ".lsd-partial"  # next to the blob; kept on failure so the next run resumes
CHUNK = 1 << 20
RETRIES = 4  # resumed attempts after a dropped connection, within one run
RETRY_PAUSE_S = 1.0  # before the first retry; doubled for each next one


def download_timeout() -> float:
    """Seconds a connection may stay silent: HF_HUB_DOWNLOAD_TIMEOUT (huggingface_hub's own
    variable), else 60."""
    try:
        return float(os.environ.get("HF_HUB_DOWNLOAD_TIMEOUT", "60"))
    except ValueError:
        return 60.0


def _endpoint() -> str:
    """HF_ENDPOINT read at call time (huggingface_hub reads it once, at import)."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def _metadata(spec: ModelSpec):
    """What the Hub says about the file (commit, etag, size, download URL); LsdError else."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import EntryNotFoundError

    where = f"{spec.file} from {spec.repo}"
    endpoint = _endpoint()
    try:
        meta = get_hf_file_metadata(hf_hub_url(spec.repo, spec.file, revision=spec.revision,
                                               endpoint=endpoint),
                                    endpoint=endpoint)
    except EntryNotFoundError:
        raise LsdError(f"{spec.file} not found in {spec.repo}") from None
    except Exception as exc:  # noqa: BLE001 - OSError, HfHubHTTPError, httpx's own errors
        raise repo_error(exc, spec.repo) or LsdError(
            f"cannot reach the Hugging Face Hub to fetch {where} (offline?): "
            f"{_short(exc)}; retry with network, or pass a local .gguf path") from None
    if not meta.commit_hash or not meta.etag:
        raise LsdError(f"the Hub gave no commit/etag for {where}; cannot cache it")
    if not re.fullmatch(r"[\w.-]+", meta.etag + meta.commit_hash) or ".." in meta.etag:
        raise LsdError(f"the Hub gave an etag or commit for {where} that is no file name; "
                       "refusing to write it into the cache")  # they become paths
    return meta


def hub_size(spec: ModelSpec) -> int | None:
    """The Hub's size of spec.file (one HEAD request), or None when it cannot say."""
    try:
        return _metadata(spec).size
    except LsdError:
        return None


def repo_error(exc: BaseException, repo: str) -> LsdError | None:
    """The user's error a Hub exception about `repo` stands for (gated, missing), or None."""
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    if isinstance(exc, GatedRepoError):  # a subclass of RepositoryNotFoundError: first
        return LsdError(f"{repo} is gated: accept its license on the Hub and log in "
                        "(`hf auth login`), then retry")
    if isinstance(exc, RepositoryNotFoundError):
        return LsdError(f"repository {repo} not found on the Hub")
    return None


def _short(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__


def _repo_folder(spec: ModelSpec) -> Path:
    from huggingface_hub.constants import HF_HUB_CACHE

    root = cache_dir() or Path(HF_HUB_CACHE)
    return root / ("models--" + spec.repo.replace("/", "--"))


def _check_space(folder: Path, needed: int, where: str) -> None:
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise LsdError(f"not enough disk space for {where}: {needed / 2**20:.0f} MiB more "
                       f"needed, {free / 2**20:.0f} MiB free in {folder}")


def _fetch(url: str, partial: Path, size: int | None, where: str) -> None:
    """Append the rest of the file to `partial` (HTTP Range from its current size)."""
    from huggingface_hub.utils import build_hf_headers

    start = partial.stat().st_size if partial.exists() else 0
    headers = {"Accept-Encoding": "identity"}
    if same_origin(url, _endpoint()):  # the token is the Hub's business, not a CDN's
        headers.update(build_hf_headers())
    if start:
        headers["Range"] = f"bytes={start}-"
    request = urllib.request.Request(url, headers=headers)
    opener = urllib.request.build_opener(_TokenStaysHome)
    try:
        response = opener.open(request, timeout=download_timeout())
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and size is not None and start == size:
            return  # already complete
        if exc.code == 416:  # a partial file the server cannot continue: start over
            partial.unlink(missing_ok=True)
            raise ConnectionResetError("the server refused to resume (HTTP 416)") from None
        raise
    with response:
        resumed = start and response.status == 206  # 200: the server sent it all again
        with partial.open("ab" if resumed else "wb") as out, \
                _progress(where, size, start if resumed else 0) as bar:
            while chunk := response.read1(CHUNK):  # what has arrived, not a full MiB
                out.write(chunk)
                bar.update(len(chunk))


def same_origin(url: str, other: str) -> bool:
    """Same scheme, host and port (where a credential may go)."""
    def origin(text: str) -> tuple:
        part = urllib.parse.urlsplit(text)
        return part.scheme, part.hostname, part.port or {"http": 80, "https": 443}.get(
            part.scheme)

    return origin(url) == origin(other)


class _TokenStaysHome(urllib.request.HTTPRedirectHandler):
    """Follows redirects like urllib, but drops Authorization when one leaves the origin
    (the Hub sends LFS downloads to a CDN with a signed URL), as huggingface_hub does."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and not same_origin(newurl, req.full_url):
            new.remove_header("Authorization")
        return new


def _progress(where: str, total: int | None, done: int):
    from huggingface_hub.utils import tqdm

    return tqdm(total=total, initial=done, unit="B", unit_scale=True, desc=where, leave=False)


def _install(spec: ModelSpec, folder: Path, meta, blob: Path) -> Path:
    """Link the blob into the cache's snapshot for this commit, as huggingface_hub does."""
    snapshot = folder / "snapshots" / meta.commit_hash / spec.file
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    if not snapshot.exists():
        tmp = snapshot.with_name(snapshot.name + PARTIAL_SUFFIX)
        tmp.unlink(missing_ok=True)
        try:
            tmp.symlink_to(os.path.relpath(blob, snapshot.parent))
        except OSError:  # no symlinks on this filesystem: a hard link (no copy)
            os.link(blob, tmp)
        os.replace(tmp, snapshot)
    if spec.revision is None:  # a pinned commit does not move what main points at
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / "main").write_text(meta.commit_hash)
    return snapshot


def snapshot_commit(path: Path, file: str) -> str:
    """The commit of the cache snapshot that holds `path` (.../snapshots/<commit>/<file>)."""
    return path.parents[len(Path(file).parts) - 1].name


def download(spec: ModelSpec, notify: Callable[[str], None] | None = None) -> Path:
    """Fetch spec.file from spec.repo into the Hub cache; resumes a partial download left by
    an interrupted run (Ctrl-C, lost connection, full disk), retries a dropped connection
    within the run, and checks size and sha256."""
    where = f"{spec.file} from {spec.repo}"
    found = cached_file(spec)
    if offline() or found is not None:
        if found is None:
            raise LsdError(f"{where} is not in the Hugging Face cache and HF_HUB_OFFLINE=1 "
                           "forbids downloading it; fetch it elsewhere, or pass a .gguf path")
        return found
    meta = _metadata(spec)
    _check_pinned(spec, meta, where)
    if notify is not None and _xet_backed(meta):
        notify(f"{where} is stored with Xet; lsd fetches it over HTTP from the Hub's bridge, "
               "resumable across runs (hf_xet's own transfer keeps no partial file when a run "
               "ends)")
    folder = _repo_folder(spec)
    (folder / "blobs").mkdir(parents=True, exist_ok=True)
    blob = folder / "blobs" / meta.etag
    partial = blob.with_name(blob.name + PARTIAL_SUFFIX)
    # one writer per blob: a second `lsd pull` of the same file waits here, then finds the
    # blob complete, instead of appending to the same bytes. huggingface_hub's own lock (file,
    # permissions, fallback where flock is missing), so `hf download` and lsd take turns too.
    lock = folder.parent / ".locks" / folder.name / f"{meta.etag}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with WeakFileLock(lock):
        if not blob.exists():
            _fetch_blob(spec, meta, folder, partial, where)
            _verify_partial(spec, meta, partial)  # a blob, once there, was checked
            os.replace(partial, blob)
    return _install(spec, folder, meta, blob)


def _verify_partial(spec: ModelSpec, meta, partial: Path) -> None:
    """sha256 of the finished download against the registry's, else the Hub's LFS etag (the
    sha256 of an LFS file); a mismatch deletes it (it is damaged)."""
    lfs_sha = meta.etag if re.fullmatch(r"[0-9a-f]{64}", meta.etag) else None
    expected = (spec.sha256 or lfs_sha or "").lower()
    if not expected:
        return
    got = sha256_of(partial)
    if got != expected:
        partial.unlink()
        raise LsdError(f"{spec.file}: sha256 mismatch (expected {expected}, got {got}); the "
                       "download was deleted, run the same command again")


def _xet_backed(meta) -> bool:
    """The Hub says the file is Xet-backed and the hf_xet client is installed (then a user
    may wonder why lsd does not use it)."""
    return (getattr(meta, "xet_file_data", None) is not None
            and importlib.util.find_spec("hf_xet") is not None)


def _check_pinned(spec: ModelSpec, meta, where: str) -> None:
    """A registry sha256 that the Hub's file no longer has (re-uploaded under the same name):
    say so before downloading, instead of downloading and deleting it every time."""
    hub_sha = meta.etag if re.fullmatch(r"[0-9a-f]{64}", meta.etag) else None
    if spec.sha256 and hub_sha and hub_sha != spec.sha256.lower():
        raise LsdError(f"{where} changed on the Hub since the registry pinned it (sha256 "
                       f"{spec.sha256[:12]}..., the Hub's file now {hub_sha[:12]}...): nothing "
                       "was downloaded; update the entry's sha256 in your models.toml if you "
                       "trust the new file")


def _fetch_blob(spec: ModelSpec, meta, folder: Path, partial: Path, where: str) -> None:
    """Bring `partial` to the Hub's size. A failed attempt is resumed (HTTP Range) after a
    growing pause, with a fresh download URL (signed ones expire); RETRIES attempts in a row
    that bring nothing end it with an LsdError that says what was kept."""
    location, failures = meta.location, 0
    while True:
        have = partial.stat().st_size if partial.exists() else 0
        if meta.size is not None and have > meta.size:  # not this file's bytes: start over
            partial.unlink()
            have = 0
        if meta.size is not None:
            _check_space(folder / "blobs", meta.size - have, where)
        failure, retry = _attempt(location, partial, meta.size, where)
        got = partial.stat().st_size if partial.exists() else 0
        if failure is None:
            return
        failures = 0 if got > have else failures + 1  # progress: keep going
        if not retry or failures > RETRIES:
            raise LsdError(f"download of {where} {failure}; {got / 2**20:.0f} MiB kept, the "
                           "same command resumes")
        time.sleep(RETRY_PAUSE_S * 2 ** max(0, failures - 1))
        fresh = _metadata(spec)
        if fresh.etag != meta.etag:
            raise LsdError(f"{where} changed on the Hub during the download; run the same "
                           "command again")
        location = fresh.location


def _attempt(url: str, partial: Path, size: int | None, where: str) -> tuple[str | None, bool]:
    """One fetch: (None, _) when the file is complete, else (what failed, worth a retry)."""
    try:
        _fetch(url, partial, size, where)
    except urllib.error.HTTPError as exc:  # 403: an expired signed URL; 408, 429, 5xx: later
        return f"failed: HTTP {exc.code}", exc.code in (403, 408, 429) or exc.code >= 500
    except OSError as exc:  # URLError, reset connections, write errors (disk full)
        return f"failed: {exc.strerror or exc}", not _disk_error(exc)
    except Exception as exc:  # noqa: BLE001 - http.client's IncompleteRead and friends
        return f"interrupted: {_short(exc)}", True
    got = partial.stat().st_size if partial.exists() else 0
    if size is not None and got < size:
        return (f"interrupted at {got / 2**20:.1f} of {size / 2**20:.1f} MiB (connection "
                "closed)"), True
    return None, False


def _disk_error(exc: OSError) -> bool:
    """A local write failure (full disk, read-only folder): retrying cannot help."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES)


def remove_cached(repo: str, files: list[str], name: str) -> str:
    """Delete the cached revision(s) holding `files` of `repo` (paths in the repo) with
    huggingface_hub's deletion strategy (blobs no other revision uses go too); return the
    space freed, as text. Refused when those revisions hold other files, which deleting them
    would take along."""
    from huggingface_hub import scan_cache_dir

    info = scan_cache_dir(cache_dir())
    revisions = [rev for cached in info.repos if cached.repo_id == repo
                 and cached.repo_type == "model" for rev in cached.revisions
                 if set(files) & _snapshot_files(rev)]
    if not revisions:
        raise LsdError(f"{name} is not downloaded ({', '.join(files)} from {repo})")
    others = sorted(set().union(*(_snapshot_files(rev) for rev in revisions)) - set(files))
    if others:
        raise LsdError(f"the cached {repo} also holds {', '.join(others)}, which removing "
                       f"{name} would delete too; use `hf cache delete` to choose")
    strategy = info.delete_revisions(*(rev.commit_hash for rev in revisions))
    strategy.execute()
    return strategy.expected_freed_size_str


def _snapshot_files(revision) -> set[str]:
    """Paths in the repo of a cached revision's files (file_name is only the base name)."""
    return {f.file_path.relative_to(revision.snapshot_path).as_posix()
            for f in revision.files}
