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
from dataclasses import replace
from pathlib import Path

from filelock import FileLock

from .errors import LsdError
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

    found = try_to_load_from_cache(spec.repo, spec.file, cache_dir=cache_dir())
    return Path(found) if isinstance(found, str) and Path(found).is_file() else None


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def verify(spec: ModelSpec, path: Path) -> None:
    """Check the sha256 from the registry; a mismatching file is deleted (it is corrupt)."""
    if not spec.sha256:
        return
    got = sha256_of(path)
    if got != spec.sha256.lower():
        real = path.resolve()
        for p in {path, real}:
            p.unlink(missing_ok=True)
        raise LsdError(f"{spec.file}: sha256 mismatch (expected {spec.sha256}, got {got}); "
                       "the corrupt download was deleted, run `lsd pull` again")


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
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        RepositoryNotFoundError,
    )

    where = f"{spec.file} from {spec.repo}"
    endpoint = _endpoint()
    try:
        meta = get_hf_file_metadata(hf_hub_url(spec.repo, spec.file, endpoint=endpoint),
                                    endpoint=endpoint)
    except GatedRepoError:
        raise LsdError(f"{spec.repo} is gated: accept its license on the Hub and log in "
                       "(`hf auth login`), then retry") from None
    except RepositoryNotFoundError:
        raise LsdError(f"repository {spec.repo} not found on the Hub") from None
    except EntryNotFoundError:
        raise LsdError(f"{spec.file} not found in {spec.repo}") from None
    except Exception as exc:  # noqa: BLE001 - OSError, HfHubHTTPError, httpx's own errors
        raise LsdError(f"cannot reach the Hugging Face Hub to fetch {where} (offline?): "
                       f"{_short(exc)}; retry with network, or pass a local .gguf path") from None
    if not meta.commit_hash or not meta.etag:
        raise LsdError(f"the Hub gave no commit/etag for {where}; cannot cache it")
    return meta


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
    a, b = urllib.parse.urlsplit(url), urllib.parse.urlsplit(other)
    return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port)


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
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / "main").write_text(meta.commit_hash)
    return snapshot


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
    # blob complete, instead of appending to the same bytes. huggingface_hub's own lock file
    # for this blob, so that `hf download` and lsd take turns too.
    lock = folder.parent / ".locks" / folder.name / f"{meta.etag}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock)):
        if not blob.exists():
            _fetch_blob(meta, folder, partial, where)
            os.replace(partial, blob)
    path = _install(spec, folder, meta, blob)
    # The Hub's etag of an LFS file is its sha256: check it when the registry gives none.
    lfs_sha = meta.etag if re.fullmatch(r"[0-9a-f]{64}", meta.etag) else None
    verify(replace(spec, sha256=spec.sha256 or lfs_sha), path)
    return path


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


def _fetch_blob(meta, folder: Path, partial: Path, where: str) -> None:
    """Bring `partial` to the Hub's size: a dropped connection is resumed (HTTP Range) up to
    RETRIES times with a growing pause; then an LsdError says what was kept."""
    for attempt in range(RETRIES + 1):
        have = partial.stat().st_size if partial.exists() else 0
        if meta.size is not None:
            _check_space(folder / "blobs", meta.size - have, where)
        try:
            _fetch(meta.location, partial, meta.size, where)
            failure = None
        except OSError as exc:  # URLError, reset connections, write errors (disk full)
            failure, retry = f"failed: {exc.strerror or exc}", not _disk_error(exc)
        except Exception as exc:  # noqa: BLE001 - http.client's IncompleteRead and friends
            failure, retry = f"interrupted: {_short(exc)}", True
        got = partial.stat().st_size if partial.exists() else 0
        if failure is None and meta.size is not None and got < meta.size:
            failure, retry = (f"interrupted at {got / 2**20:.1f} of {meta.size / 2**20:.1f} "
                              "MiB (connection closed)"), True
        if failure is None:
            break
        if not retry or attempt == RETRIES:
            raise LsdError(f"download of {where} {failure}; {got / 2**20:.0f} MiB kept, the "
                           "same command resumes")
        time.sleep(RETRY_PAUSE_S * 2 ** attempt)
    got = partial.stat().st_size
    if meta.size is not None and got > meta.size:
        partial.unlink()
        raise LsdError(f"download of {where} has {got} bytes, the Hub says {meta.size}; "
                       "the partial file was deleted, run the same command again")


def _disk_error(exc: OSError) -> bool:
    """A local write failure (full disk, read-only folder): retrying cannot help."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES)


def remove_cached(spec: ModelSpec) -> str:
    """Delete the cached revision(s) holding spec.file with huggingface_hub's deletion
    strategy (blobs no other revision uses go too); return the space freed, as text. Refused
    when those revisions hold other files, which deleting them would take along."""
    from huggingface_hub import scan_cache_dir

    if cached_file(spec) is None:
        raise LsdError(f"{spec.name} is not downloaded ({spec.file} from {spec.repo})")
    info = scan_cache_dir(cache_dir())
    revisions = [rev for repo in info.repos if repo.repo_id == spec.repo
                 and repo.repo_type == "model" for rev in repo.revisions
                 if any(f.file_name == spec.file for f in rev.files)]
    others = sorted({f.file_name for rev in revisions for f in rev.files} - {spec.file})
    if others:
        raise LsdError(f"the cached {spec.repo} also holds {', '.join(others)}, which removing "
                       f"{spec.file} would delete too; use `hf cache delete` to choose")
    strategy = info.delete_revisions(*(rev.commit_hash for rev in revisions))
    strategy.execute()
    return strategy.expected_freed_size_str
