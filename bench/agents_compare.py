"""An agent's tool-calling loop through `lsd serve` against llama.cpp's `llama-server`, on the
same prompts, the same constraints and (checked) the same answers.

    .venv/bin/python bench/agents_compare.py --llama-cpp ~/.cache/lsd-peers/build/bin \\
        [--conversations 6] [--workload agents|repeat|edits|six-edits]

Workloads: "agents" (below), "repeat" (the same conversations three times, the second and
third with small changes: bench/make_workload_sets.py's VARIATIONS; both servers keep what
they saw: lsd's suffix index, llama-server's ngram-mod pool), "edits" (functions of
bench/code-edit.jsonl edited over three turns, each answer appended to the conversation)
and "six-edits" (bench/six-edits.jsonl: one module edited six ways, six separate requests
of the whole file, up to 768 tokens each; per edit, whether lsd drafted from the earlier
answers: the share of its accepted tokens from the suffix index).

Each conversation of bench/agents.jsonl (3 tools: get_weather, search_docs, calculator)
runs 3 turns, as an agent does: turns 1 and 2 must call a tool (tool_choice "required"; the
client appends a canned result as a `tool` message), turn 3 answers (tool_choice "none").

lsd serve gets OpenAI chat requests with the tools. llama-server does not enforce
"required" for Qwen2.5-Coder's template (its answers are free text, measured: no
tool_calls), so it gets what lsd evaluates, on its /completion endpoint: lsd's rendered
prompt (checked equal to llama-server's own /apply-template rendering) and, for a call turn,
lsd's call grammar (GBNF from the tools' parameter schemas); for the answer turn the
<tool_call> token banned, as lsd's "none" does. Its answers are read back with lsd's own
call parser and compared with lsd's: a turn whose answers differ is flagged, and its speed
is not counted.

Per turn and column: the time to the complete answer (a whole tool call, or the final
text; client side, prefill included: both keep the conversation cached) and the decode
speed the server reports. Columns: lsd serve (its defaults: strict, auto drafter with the
0.5B draft offered), llama-server plain, --spec-type ngram-simple, ngram-mod, and the 0.5B
draft (K 4); every request goes to every column before the next (interleaved). Prints the
per-turn table and, per column, the median speed ratio lsd / column over the equal turns.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_compare import DRAFT, TARGET, free_port, lsd_serve, repack_args  # noqa: E402

from lsd_local.backend import schema_to_gbnf  # noqa: E402
from lsd_local.chat.tools import FORMATS, section_calls, tool_plan  # noqa: E402

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search_docs", "description": "Search the project documentation",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "max_results": {"type": "integer"}},
            "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "calculator", "description": "Evaluate an arithmetic expression",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]}}},
]
TURNS = ("required", "required", "none")
PEERS = {"plain": (), "ngram-simple": ("--spec-type", "ngram-simple"),
         "ngram-mod": ("--spec-type", "ngram-mod"),
         "draft K4": ("-md", str(DRAFT), "--spec-type", "draft-simple", "--spec-draft-n-max", "4")}
THREADS = "2"


def canned_result(name: str, arguments: str) -> str:
    """What the tool returns: deterministic, echoing its arguments as real tools do."""
    args = json.loads(arguments)
    if name == "get_weather":
        return json.dumps({"city": args.get("city"), "unit": args.get("unit", "celsius"),
                           "temperature": 21, "conditions": "partly cloudy",
                           "wind_kmh": 14})
    if name == "search_docs":
        return json.dumps({"query": args.get("query"), "results": [
            {"title": "Configuring the client", "snippet": f"{args.get('query')}: set "
             "retry_policy=RetryPolicy(max_attempts=3, backoff=0.5) on the Client."}]})
    return json.dumps({"expression": args.get("expression"), "value": 42.0})


def llama_server(bin_dir: Path, *args: str):
    import subprocess

    port = free_port()
    proc = subprocess.Popen([str(bin_dir / "llama-server"), "-m", str(TARGET), "--jinja",
                             "-c", "4096", "-t", THREADS, "--port", str(port), "-np", "1",
                             *repack_args(), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, port
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"llama-server {args} did not start")


def post(port: int, path: str, body: dict) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=900) as response:
        return json.load(response)


def lsd_turn(client, messages: list, choice: str | None, max_tokens: int = 256) -> dict:
    start = time.perf_counter()
    tools = {"tools": TOOLS, "tool_choice": choice} if choice else {}
    answer = client.chat.completions.create(model="lsd", messages=messages,
                                            max_tokens=max_tokens, temperature=0, **tools)
    seconds = time.perf_counter() - start
    message = answer.choices[0].message
    calls = [(c.function.name, c.function.arguments) for c in message.tool_calls or ()]
    extra = answer.model_extra["lsd"]
    by_source = extra.get("accepted_by_source") or {}
    return {"seconds": seconds, "tps": extra["decode_tokens_per_second"],
            "calls": calls, "text": message.content or "", "message": message,
            "tokens": answer.usage.completion_tokens,
            "from_earlier": by_source.get("suffix", 0) / max(1, sum(by_source.values()))}


def llama_turn(port: int, prompt: str, grammar: str | None, opener_id: int | None,
               n_predict: int = 256) -> dict:
    body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "cache_prompt": True}
    if grammar:
        body["grammar"] = grammar
    elif opener_id is not None:  # (an answer turn of an agent: no call)
        body["logit_bias"] = [[opener_id, False]]
    start = time.perf_counter()
    answer = post(port, "/completion", body)
    seconds = time.perf_counter() - start
    text = answer["content"]
    calls = [(c.name, c.arguments) for c in section_calls(FORMATS["hermes"], text)[0]
             if c.name] if grammar else []
    return {"seconds": seconds, "tps": answer["timings"]["predicted_per_second"],
            "calls": calls, "text": "" if grammar else text,
            "tokens": answer["timings"]["predicted_n"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp build/bin")
    parser.add_argument("--conversations", type=int, default=6)
    parser.add_argument("--workload", choices=["agents", "repeat", "edits", "six-edits"],
                        default="agents")
    parser.add_argument("--json", default="agents-compare.json", help="every turn measured")
    parser.add_argument("--peers", default=",".join(PEERS),
                        help="llama-server columns, comma-separated, of: " + ", ".join(PEERS))
    args = parser.parse_args()
    from lsd_local import Engine

    conversations = [json.loads(line) for line in
                     (Path(__file__).with_name("agents.jsonl")).read_text().splitlines()]
    conversations = conversations[:args.conversations]
    if args.workload == "repeat":
        conversations = repeated(conversations)
    with Engine.load(TARGET, drafter="none", n_ctx=4096) as renderer:
        plan = tool_plan(renderer.chat_template, TOOLS, "required", True)
        grammar = plan.grammar(lambda s: schema_to_gbnf(s, "tools"))[0]
        opener_id = renderer.target.vocab.tokenize("<tool_call>", add_special=False)[0]
        columns = {"lsd serve": lsd_serve()}
        for peer in args.peers.split(","):
            if peer not in PEERS:
                raise SystemExit(f"unknown peer {peer!r}; choose from {', '.join(PEERS)}")
            columns[f"llama-server {peer}"] = llama_server(args.llama_cpp, *PEERS[peer])
        try:
            rows = run_edits(columns, renderer, args.conversations) \
                if args.workload == "edits" else run_six_edits(columns, renderer) \
                if args.workload == "six-edits" else \
                run_all(columns, conversations, renderer, grammar, opener_id)
        finally:
            for proc, _ in columns.values():
                proc.terminate()
    Path(args.json).write_text(json.dumps(
        [{k: ({kk: vv for kk, vv in v.items() if kk != "message"} if isinstance(v, dict)
              else v) for k, v in row.items()} for row in rows], indent=1))
    report(rows, list(columns))
    if args.workload == "repeat":
        print("\nasked again (the second and third time):")
        report([r for r in rows if not r["id"].endswith("-0")], list(columns))


def repeated(conversations: list[dict]) -> list[dict]:
    """Each conversation three times: as is, then with each of VARIATIONS' small changes."""
    from make_workload_sets import varied

    return [{"id": f"{conv['id']}-{round_}", "user": conv["user"]}
            for round_, conv in varied(conversations)]


def run_edits(columns, renderer, n: int) -> list[dict]:
    """Functions edited over three turns; every column gets lsd's conversation so far."""
    from make_workload_sets import EDIT_TURNS

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{columns['lsd serve'][1]}/v1",
                           api_key="none", timeout=900)
    edits = [json.loads(line) for line in
             Path(__file__).with_name("code-edit.jsonl").read_text().splitlines()][:n]
    rows = []
    for item in edits:
        messages = [dict(item["messages"][0])]
        for turn in range(1 + len(EDIT_TURNS)):
            prompt = renderer.prompt_text(messages)
            theirs = post(columns["llama-server plain"][1], "/apply-template",
                          {"messages": messages})["prompt"]
            if theirs != prompt:
                raise SystemExit(f"{item['id']} turn {turn}: the prompts differ")
            row = {"id": item["id"], "turn": turn + 1, "lsd serve": lsd_turn(client, messages,
                                                                            None)}
            for name, (_, port) in columns.items():
                if name != "lsd serve":
                    row[name] = llama_turn(port, prompt, None, None)
            rows.append(row)
            print_row(row, list(columns))
            if turn < len(EDIT_TURNS):
                messages += [{"role": "assistant", "content": row["lsd serve"]["text"]},
                             {"role": "user", "content": EDIT_TURNS[turn]}]
    return rows


def run_six_edits(columns, renderer) -> list[dict]:
    """bench/six-edits.jsonl's requests in order, each to every column."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{columns['lsd serve'][1]}/v1",
                           api_key="none", timeout=900)
    rows = []
    for line in Path(__file__).with_name("six-edits.jsonl").read_text().splitlines():
        item = json.loads(line)
        prompt = renderer.prompt_text(item["messages"])
        theirs = post(columns["llama-server plain"][1], "/apply-template",
                      {"messages": item["messages"]})["prompt"]
        if theirs != prompt:
            raise SystemExit(f"{item['id']}: the prompts differ")
        row = {"id": item["id"], "turn": 1,
               "lsd serve": lsd_turn(client, item["messages"], None, item["max_tokens"])}
        for name, (_, port) in columns.items():
            if name != "lsd serve":
                row[name] = llama_turn(port, prompt, None, None, item["max_tokens"])
        rows.append(row)
        print_row(row, list(columns))
        print(f"  lsd drafted {row['lsd serve']['from_earlier']:.0%} of its accepted tokens "
              "from earlier answers", flush=True)
    return rows


def run_all(columns, conversations, renderer, grammar, opener_id) -> list[dict]:
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{columns['lsd serve'][1]}/v1",
                           api_key="none", timeout=900)
    rows = []
    for conv in conversations:
        messages = [{"role": "user", "content": conv["user"]}]
        for turn, choice in enumerate(TURNS):
            prompt = renderer.prompt_text(messages, tools=TOOLS)
            theirs = post(columns["llama-server plain"][1], "/apply-template",
                          {"messages": messages, "tools": TOOLS})["prompt"]
            if theirs != prompt:
                raise SystemExit(f"{conv['id']} turn {turn}: the prompts differ")
            ours = lsd_turn(client, messages, choice)
            row = {"id": conv["id"], "turn": turn + 1, "lsd serve": ours}
            for name, (_, port) in columns.items():
                if name != "lsd serve":
                    row[name] = llama_turn(port, prompt, grammar if choice == "required"
                                           else None, opener_id)
            rows.append(row)
            print_row(row, list(columns))
            messages.append(ours["message"].model_dump(exclude_none=True))
            for c in ours["message"].tool_calls or ():
                messages.append({"role": "tool", "tool_call_id": c.id,
                                 "content": canned_result(c.function.name,
                                                          c.function.arguments)})
            if not ours["calls"]:
                break
    return rows


def same(a: dict, b: dict) -> bool:
    return a["calls"] == b["calls"] and a["text"].strip() == b["text"].strip()


def print_row(row: dict, names: list[str]) -> None:
    lsd = row["lsd serve"]
    cells = [f"{name}: {row[name]['seconds']:.2f}s {row[name]['tps']:.1f}t/s"
             + ("" if name == "lsd serve" or same(lsd, row[name]) else " (differs)")
             for name in names]
    print(f"{row['id']} turn {row['turn']} ({lsd['tokens']} tok, "
          f"{len(lsd['calls'])} call(s)): " + " | ".join(cells), flush=True)


def report(rows: list[dict], names: list[str]) -> None:
    print("\nmedian over the turns with equal answers (lsd serve / column):")
    for name in names[1:]:
        equal = [r for r in rows if same(r["lsd serve"], r[name])]
        if not equal:
            print(f"  {name}: no equal answers")
            continue
        time_ratio = statistics.median(r[name]["seconds"] / r["lsd serve"]["seconds"]
                                       for r in equal)
        timed = [r for r in equal if r[name]["tps"] > 0 and r["lsd serve"]["tps"] > 0]
        speed_part = "{:.2f}x".format(statistics.median(
            r["lsd serve"]["tps"] / r[name]["tps"] for r in timed)) if timed else "not reported"
        calls = [r for r in equal if r["lsd serve"]["calls"]]
        call_part = "" if not calls else " (tool calls alone: {:.2f}x)".format(
            statistics.median(r[name]["seconds"] / r["lsd serve"]["seconds"] for r in calls))
        print(f"  {name}: {len(equal)}/{len(rows)} turns equal; time to the answer "
              f"{time_ratio:.2f}x faster with lsd{call_part}, decode speed {speed_part}")


if __name__ == "__main__":
    os.environ.setdefault("LSD_NO_STATE", "1")
    main()
