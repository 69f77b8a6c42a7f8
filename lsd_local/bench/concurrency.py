"""`lsd bench --concurrency N`: several clients at once, as agents and chat UIs send them.

Each server column (lsd serve with --parallel N, the same with --parallel 1, llama-server
-np N plain and with each speculative type) gets the same workload, one column after the
other on this machine: N clients, each sending its share of mixed long and short chat
requests one after another, streamed and greedy. Reported per column: aggregate tokens per
second (every completion token over the wall time from the first request to the last answer),
the median and worst latency of the short requests, and how many answers equal those lsd
gives one request at a time (--parallel 1: same prompt bytes, greedy), and where an answer
went another way, how close the alone answer's two likeliest tokens were there (asked again
with logprobs, untimed): batches of another size or mix round the logits differently, so a
near tie may go either way. Then a short request sent while a long answer streams, against
the same request alone.
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..stats import Origin
from ..text import TextAssembler

SHORT_TOKENS = 32  # a short request's answer (a title, a tag, a tool step)
LONG_TOKENS = 512  # the long answer a short request is sent beside
START_TIMEOUT = 600.0  # seconds a server may take to load
PARTING_WINDOW = 16  # characters before the first differing one where answers may have parted
LLAMA_SERVER_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod",
                      "ngram-cache")


@dataclass(frozen=True)
class Ask:
    """One request of the workload."""

    messages: tuple
    max_tokens: int


@dataclass
class Answer:
    """What a client got: the text, completion tokens and times (time.perf_counter)."""

    text: str = ""
    tokens: int = 0
    sent: float = 0.0
    first: float | None = None
    done: float = 0.0
    error: str | None = None
    top_two_gaps: list[tuple[bytes, float]] = field(default_factory=list)  # (token, gap) asked

    @property
    def latency(self) -> float:
        return self.done - self.sent


@dataclass
class Column:
    """One server configuration's results."""

    name: str
    answers: list[Answer] = field(default_factory=list)  # of its first run
    walls: list[float] = field(default_factory=list)  # seconds per run
    same_as_alone: int | None = None  # answers equal lsd's one-at-a-time ones
    tie_gaps: list[str] = field(default_factory=list)  # where answers part (compare_with_alone)

    @property
    def wall(self) -> float:
        """The median run's wall seconds."""
        return statistics.median(self.walls) if self.walls else 0.0

    @property
    def tokens_per_second(self) -> float:
        return sum(a.tokens for a in self.answers) / self.wall if self.wall else 0.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """A server subprocess on loopback, ready once /health says 200 (its models loaded)."""

    def __init__(self, name: str, command: Sequence[str], port: int) -> None:
        self.name, self.port = name, port
        self.proc = subprocess.Popen(list(command), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT
        while not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{name} did not start: {' '.join(command)}")
            time.sleep(0.5)  # (a load, not a test: polling the health endpoint)

    def _healthy(self) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            conn.request("GET", "/health")
            return conn.getresponse().status == 200
        except OSError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def lsd_server(target: Path, draft: Path | None, parallel: int, ctx: int,
               threads: int | None) -> Server:
    port = free_port()
    command = [sys.executable, "-m", "lsd_local", "serve", str(target), "--ctx", str(ctx),
               "--port", str(port), "--parallel", str(parallel), "--fresh"]
    command += ["--draft", str(draft)] if draft is not None else ["--draft", "none"]
    command += ["--threads", str(threads)] if threads else []
    return Server(f"lsd serve --parallel {parallel}", command, port)


def llama_server(bin_dir: Path, target: Path, parallel: int, ctx: int, threads: int | None,
                 spec_type: str | None, no_repack: bool = False) -> Server:
    port = free_port()
    command = [str(bin_dir / "llama-server"), "-m", str(target), "-np", str(parallel),
               "-c", str(ctx * parallel), "--port", str(port), "--temp", "0",
               "--no-webui", "-t", str(threads or 2)]
    command += ["--spec-type", spec_type] if spec_type else []
    command += ["-nr"] if no_repack else []
    name = f"llama-server -np {parallel}" + (f" {spec_type}" if spec_type else "")
    return Server(name, command, port)


def ask_once(port: int, ask: Ask, logprobs: bool = False) -> Answer:
    """Stream one greedy chat completion; the answer's text, tokens and times (and with
    `logprobs`, each token's gap between its two likeliest tokens' log-probabilities)."""
    body = {"messages": list(ask.messages), "max_tokens": ask.max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    body.update({"logprobs": True, "top_logprobs": 2} if logprobs else {})
    answer = Answer(sent=time.perf_counter())
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=START_TIMEOUT)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body),
                     {"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            answer.error = f"HTTP {response.status}: {response.read()[:200]!r}"
            return answer
        _read_stream(response, answer)
    except Exception as exc:  # noqa: BLE001 - a cut or odd stream is this answer's error
        answer.error = f"{type(exc).__name__}: {exc}"
    finally:
        answer.done = time.perf_counter()
        conn.close()
    return answer


def _read_stream(response, answer: Answer) -> None:
    parts, chunks = [], 0
    for raw in response:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        data = json.loads(line[5:])
        if data.get("error"):  # (a failure after the stream began)
            answer.error = str(data["error"])[:200]
        for choice in data.get("choices") or ():
            text = (choice.get("delta") or {}).get("content")
            if text:
                answer.first = answer.first or time.perf_counter()
                parts.append(text)
                chunks += 1
            for item in (choice.get("logprobs") or {}).get("content") or ():
                answer.top_two_gaps.append(_top_two_gap(item))
        if data.get("usage"):
            answer.tokens = data["usage"].get("completion_tokens", 0)
    answer.text = "".join(parts)
    answer.tokens = answer.tokens or chunks


def _top_two_gap(item: dict) -> tuple[bytes, float]:
    token = bytes(item.get("bytes") or (item.get("token") or "").encode())
    top = sorted((t.get("logprob", -math.inf) for t in item.get("top_logprobs") or ()),
                 reverse=True)
    return token, (top[0] - top[1]) if len(top) >= 2 else math.inf


def divergence_gap(text: str, alone: Answer) -> float | None:
    """Where `text` first differs from `alone` (answered with logprobs): the smallest gap
    between the two likeliest tokens' log-probabilities among the alone answer's tokens that
    may be where the two took different tokens: the token that holds the first differing
    character and those that end less than PARTING_WINDOW characters before it (the other
    answer's token there may have been longer, its text the same for a while). None when
    `text` equals it, or the logprobs do not spell its text (they may go on past it: a stop
    string)."""
    theirs = alone.text
    spelled, spans = _spell(t for t, _ in alone.top_two_gaps)
    if text == theirs or not alone.top_two_gaps or not spelled.startswith(theirs):
        return None
    pairs = zip(text, theirs, strict=False)  # (the shorter may be a prefix of the other)
    first = next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(text), len(theirs)))
    gaps = [gap for (start, end), (_, gap) in zip(spans, alone.top_two_gaps, strict=True)
            if start <= first and end > first - PARTING_WINDOW]
    return min(gaps)  # (never empty: the spans cover the text, and first <= its length)


def _spell(tokens: Iterable[bytes]) -> tuple[str, list[tuple[int, int]]]:
    """The text tokens' bytes decode to as the server streams them (its TextAssembler: a
    character whose bytes two tokens share counts in the second, invalid bytes are U+FFFD),
    and each token's [start, end) in it."""
    pieces = list(tokens)
    assembler = TextAssembler(pieces.__getitem__)
    for i in range(len(pieces)):
        assembler.add(i, Origin.TARGET)
    assembler.finish()
    ends = assembler.token_ends
    return assembler.text, list(zip([0, *ends], ends, strict=False))  # (each start, end)


def run_clients(port: int, asks: list[Ask], clients: int) -> tuple[list[Answer], float]:
    """`clients` threads, each sending every clients-th request in turn; (answers in the
    order of `asks`, wall seconds from the first request to the last answer)."""
    answers: list[Answer | None] = [None] * len(asks)

    def client(first: int) -> None:
        for i in range(first, len(asks), clients):
            answers[i] = ask_once(port, asks[i])
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return ([a if a is not None else Answer(error="no answer") for a in answers],
            time.perf_counter() - start)


def short_behind_long(port: int, long_ask: Ask, short_ask: Ask) -> tuple[float, float]:
    """(the short request's latency alone, its latency sent once the long answer's first
    text has arrived)."""
    alone = ask_once(port, short_ask).latency
    started = threading.Event()

    def stream_long() -> None:
        body = {"messages": list(long_ask.messages), "max_tokens": long_ask.max_tokens,
                "temperature": 0, "stream": True}
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=START_TIMEOUT)
        try:
            conn.request("POST", "/v1/chat/completions", json.dumps(body),
                         {"Content-Type": "application/json"})
            for raw in conn.getresponse():
                if b'"content"' in raw:
                    started.set()
        finally:
            conn.close()
            started.set()  # (an answer without text, or an error: do not wait for ever)
    long_thread = threading.Thread(target=stream_long)
    long_thread.start()
    started.wait()
    behind = ask_once(port, short_ask).latency
    long_thread.join()
    return alone, behind


def workload(items: list, clients: int, max_tokens: int) -> list[Ask]:
    """Mixed long and short requests from the prompt sets' items: every other one short."""
    asks = []
    for i, item in enumerate(items):
        asks.append(Ask(tuple(item.messages), max_tokens if i % 2 == 0 else SHORT_TOKENS))
    return asks[:max(clients * 2, 2)]


def format_columns(columns: list[Column], behind: dict) -> str:
    """The report: a table of the columns, then the short-behind-long latencies."""
    base = next((c for c in columns if c.name.endswith("--parallel 1")), None)
    lines = [f"{'server':36} {'agg tok/s':>9} {'vs lsd p1':>9} {'short p50 s':>11} "
             f"{'short max s':>11} {'same text':>9} {'errors':>6}  ties"]
    for col in columns:
        shorts = [a.latency for a in col.answers
                  if a.tokens <= SHORT_TOKENS and a.error is None] or [0.0]
        ratio = (col.tokens_per_second / base.tokens_per_second
                 if base is not None and base.tokens_per_second else float("nan"))
        same = "-" if col.same_as_alone is None else f"{col.same_as_alone}/{len(col.answers)}"
        lines.append(f"{col.name:36} {col.tokens_per_second:9.1f} {ratio:9.2f} "
                     f"{statistics.median(shorts):11.2f} {max(shorts):11.2f} {same:>9} "
                     f"{sum(a.error is not None for a in col.answers):6d}  "
                     f"{' '.join(col.tie_gaps)}")
    lines.append("(ties, per request number whose answer is not the same text: where it parts "
                 "from that request asked again alone with logprobs, the smallest gap in "
                 "log-probability of the two likeliest tokens there; 'again': it is that "
                 "answer; '?': those logprobs do not spell that answer (a reasoning model's or a "
                 "tool call's markup is not in the text); 'error': a request "
                 "failed. On the first row: where the answers asked again part from the "
                 "first ones)")
    for name, (alone, behind_long) in behind.items():
        lines.append(f"{name}: a {SHORT_TOKENS}-token request alone {alone:.2f} s, sent while a "
                     f"{LONG_TOKENS}-token answer streams {behind_long:.2f} s "
                     f"({behind_long / alone:.1f}x)")
    return "\n".join(lines)


@dataclass(frozen=True)
class ConcurrencyPlan:
    """What `lsd bench --concurrency` runs."""

    target: Path
    draft: Path | None
    clients: int
    asks: tuple  # Ask, in the order the clients take them
    ctx: int
    threads: int | None
    repeat: int = 1
    llama_bin: Path | None = None  # llama.cpp's build/bin: llama-server columns
    spec_types: tuple[str, ...] = LLAMA_SERVER_TYPES
    no_repack: bool = False  # llama-server loads as lsd does where the CPU traps AMX (-nr)


def server_makers(plan: ConcurrencyPlan) -> list:
    """(name, start) per column: lsd one at a time first (the reference), lsd side by side,
    then llama-server plain and with each speculative type."""
    makers = [(f"lsd serve --parallel {n}", lambda n=n: lsd_server(
        plan.target, plan.draft, n, plan.ctx, plan.threads)) for n in (1, plan.clients)]
    if plan.llama_bin is not None:
        for spec in (None, *plan.spec_types):
            name = f"llama-server -np {plan.clients}" + (f" {spec}" if spec else "")
            makers.append((name, lambda spec=spec: llama_server(
                plan.llama_bin, plan.target, plan.clients, plan.ctx, plan.threads, spec,
                plan.no_repack)))
    return makers


def run_concurrency(plan: ConcurrencyPlan, say=print) -> tuple[list[Column], dict]:
    """Every column on the workload, `repeat` times in turn (A, B, A, B: these machines are
    shared; the median run counts), and the short-behind-long check on the lsd columns."""
    asks = list(plan.asks)
    columns: dict[str, Column] = {}
    behind: dict[str, tuple[float, float]] = {}
    long_ask = Ask(asks[0].messages, LONG_TOKENS)  # (the workload's first, a long one)
    short_ask = Ask(asks[-1].messages, SHORT_TOKENS)
    alone: list[Answer] = []
    for run in range(plan.repeat):
        for index, (name, start) in enumerate(server_makers(plan)):
            say(f"run {run + 1}/{plan.repeat}: {name}")
            server = start()
            try:
                ask_once(server.port, Ask(asks[0].messages, 4))  # warm-up, not timed
                answers, wall = run_clients(server.port, asks, plan.clients)
                if name.startswith("lsd") and run == 0:
                    behind[name] = short_behind_long(server.port, long_ask, short_ask)
                if index == 0 and run == 0:  # the reference again, untimed, with logprobs
                    alone = [ask_once(server.port, ask, logprobs=True) for ask in asks]
            finally:
                server.stop()
            columns.setdefault(name, Column(name, answers)).walls.append(wall)
    compare_with_alone(list(columns.values()), alone)
    return list(columns.values()), behind


def compare_with_alone(columns: list[Column], alone: list[Answer]) -> None:
    """Each column's answers against the first column's (lsd one at a time): how many are
    the same text, and where one is not, where it parts from the requests asked alone again
    with logprobs (`alone`, whose own text may differ from the first answers at a tie too):
    per request number, the gap of the two likeliest tokens' log-probabilities there
    ("3:0.026"; divergence_gap), "again" where it equals the answer asked again, "?" where
    the logprobs do not spell that answer, "error" where either request failed. The first
    column lists where its answers part from those asked again."""
    reference = columns[0].answers
    for index, col in enumerate(columns):
        col.same_as_alone = sum(a.text == r.text and a.error is None
                                for a, r in zip(col.answers, reference, strict=True))
        col.tie_gaps = []
        rows = zip(col.answers, reference, alone, strict=True)
        for number, (answer, first, again) in enumerate(rows, 1):
            if index == 0 and first.text != again.text:
                col.tie_gaps.append(f"{number}:{_parted(first, again)}")
            elif index > 0 and (answer.error is not None or answer.text != first.text):
                col.tie_gaps.append(f"{number}:{_parted(answer, again)}")


def _parted(answer: Answer, again: Answer) -> str:
    if answer.error is not None or again.error is not None:
        return "error"
    if answer.text == again.text:
        return "again"
    gap = divergence_gap(answer.text, again)
    return "?" if gap is None else f"{gap:.3f}"
