"""Regenerate the workload sets where drafting from past requests and from the grammar pays
(issues 31, 36): bench/json-extract.jsonl, bench/agents-repeat.jsonl,
bench/edits-multiturn.jsonl, bench/six-edits.jsonl, and the copy task that checks
`lsd bench --profile`'s ceiling (issue 36): bench/copy.jsonl.

    python bench/make_workload_sets.py

- json-extract: a record described in prose, to be returned as JSON under a schema (the
  request's `json_schema`): keys and punctuation are the grammar's, values come from the text.
- agents-repeat: the first turns of bench/agents.jsonl's conversations (3 tools; the turn
  must call one), asked three times with small changes (another city, another number): one
  `sequence`, so that each configuration's suffix index keeps what it answered before, as a
  server's does. All in the test split (a sequence is not cut in two).
- edits-multiturn: functions of bench/code-edit.jsonl edited in three turns (type hints, a
  docstring, a renamed parameter); each turn's conversation holds the earlier turns with the
  function as the assistant's answer. One sequence per function.

- six-edits: one module (written for this set, 57 lines) edited six ways, each a separate
  request holding the whole module as it was (an editor or agent sending the file with one
  instruction at a time): one `sequence`, all in the test split. Each answer is the module
  again with one change: the earlier answers hold the later ones' unchanged parts (as the
  prompt does) and the earlier edits' own style.

- copy: code to be repeated verbatim, where prompt lookup drafts nearly every token: the
  six-edits module whole, and the longest functions of bench/code-edit.jsonl's test split
  (500+ characters). Its best speedup (`--configs plain,strict:lookup:63`) is what the
  profile's "best case, drafts free and all accepted" predicts (docs/devices.md). All in the
  test split.

Every fourth record or function is in the dev split. The files are committed; this script
documents them.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent
RECORDS = [  # (prose, schema properties, required)
    ("Maria Lopez, 34, lives in Valencia and writes Rust and Go; reach her at "
     "maria.lopez@example.org.",
     {"name": {"type": "string"}, "age": {"type": "integer"}, "city": {"type": "string"},
      "email": {"type": "string"}, "languages": {"type": "array", "items": {"type": "string"}}}),
    ("Invoice INV-2291 from Northwind Traders to Contoso, dated 2024-03-18: 12 desk lamps at "
     "24.50 each and 3 office chairs at 189.00 each; due within 30 days.",
     {"invoice_id": {"type": "string"}, "seller": {"type": "string"},
      "buyer": {"type": "string"}, "date": {"type": "string"},
      "items": {"type": "array", "items": {"type": "object", "properties": {
          "description": {"type": "string"}, "quantity": {"type": "integer"},
          "unit_price": {"type": "number"}}, "required": ["description", "quantity",
                                                          "unit_price"]}},
      "due_days": {"type": "integer"}}),
    ("The design review for the billing service is on Tuesday 14 May at 10:30 in room B2; "
     "Priya, Tom and Lena attend, and it takes an hour.",
     {"title": {"type": "string"}, "day": {"type": "string"}, "time": {"type": "string"},
      "room": {"type": "string"}, "attendees": {"type": "array", "items": {"type": "string"}},
      "duration_minutes": {"type": "integer"}}),
    ("The Aurora X2 headphones cost 129.99 dollars, come in black and silver, weigh 254 grams "
     "and are in stock.",
     {"product": {"type": "string"}, "price": {"type": "number"},
      "colors": {"type": "array", "items": {"type": "string"}},
      "weight_grams": {"type": "integer"}, "in_stock": {"type": "boolean"}}),
    ("Bug 4471: the export button crashes the app on Android 14 when the list is empty; "
     "reported by jchen, severity high, still open.",
     {"bug_id": {"type": "integer"}, "summary": {"type": "string"},
      "platform": {"type": "string"}, "reporter": {"type": "string"},
      "severity": {"enum": ["low", "medium", "high", "critical"]},
      "status": {"enum": ["open", "closed"]}}),
    ("Flight LH 1124 leaves Frankfurt at 07:55 and lands in Lisbon at 10:05; seat 14C, "
     "economy, passenger Ana Sousa.",
     {"flight": {"type": "string"}, "from": {"type": "string"}, "to": {"type": "string"},
      "departure": {"type": "string"}, "arrival": {"type": "string"},
      "seat": {"type": "string"}, "cabin": {"enum": ["economy", "business", "first"]},
      "passenger": {"type": "string"}}),
    ("Pancakes for four: 200 g flour, 2 eggs, 300 ml milk and a pinch of salt; rest the "
     "batter 20 minutes, then fry each side for one minute.",
     {"dish": {"type": "string"}, "servings": {"type": "integer"},
      "ingredients": {"type": "array", "items": {"type": "object", "properties": {
          "name": {"type": "string"}, "amount": {"type": "string"}},
          "required": ["name", "amount"]}},
      "steps": {"type": "array", "items": {"type": "string"}}}),
    ("We are hiring a senior backend engineer in Berlin (hybrid, 3 days in the office) for "
     "75,000 to 90,000 euros a year; Python and PostgreSQL required.",
     {"role": {"type": "string"}, "seniority": {"enum": ["junior", "mid", "senior"]},
      "location": {"type": "string"}, "remote": {"enum": ["onsite", "hybrid", "remote"]},
      "salary_min": {"type": "integer"}, "salary_max": {"type": "integer"},
      "skills": {"type": "array", "items": {"type": "string"}}}),
    ("2024-05-02T13:44:09Z ERROR payment-api request 7f3a timed out after 30000 ms calling "
     "ledger-service (retry 2 of 3).",
     {"timestamp": {"type": "string"}, "level": {"enum": ["DEBUG", "INFO", "WARN", "ERROR"]},
      "service": {"type": "string"}, "request_id": {"type": "string"},
      "timeout_ms": {"type": "integer"}, "dependency": {"type": "string"},
      "retry": {"type": "integer"}, "max_retries": {"type": "integer"}}),
    ("Send the parcel to Jonas Weber, Lindenstrasse 12, 10969 Berlin, Germany; phone "
     "+49 30 1234567; leave it with a neighbour if he is out.",
     {"name": {"type": "string"}, "street": {"type": "string"},
      "postal_code": {"type": "string"}, "city": {"type": "string"},
      "country": {"type": "string"}, "phone": {"type": "string"},
      "instructions": {"type": "string"}}),
    ("The paper 'Attention Is All You Need' by Vaswani, Shazeer, Parmar and others appeared "
     "at NeurIPS 2017 and has the arXiv id 1706.03762.",
     {"title": {"type": "string"}, "authors": {"type": "array", "items": {"type": "string"}},
      "venue": {"type": "string"}, "year": {"type": "integer"}, "arxiv": {"type": "string"}}),
    ("Server web-03 in rack C7 runs Ubuntu 22.04 with 64 GB RAM and 16 cores; it is in "
     "maintenance until Friday.",
     {"hostname": {"type": "string"}, "rack": {"type": "string"}, "os": {"type": "string"},
      "ram_gb": {"type": "integer"}, "cores": {"type": "integer"},
      "state": {"enum": ["active", "maintenance", "retired"]}}),
]
VARIATIONS = [  # agents-repeat: the second and third time, small changes
    {"Lisbon": "Seville", "Porto": "Faro", "Oslo": "Bergen", "Madrid": "Valencia",
     "1450": "1380", "3920": "4100", "Reykjavik": "Tromso", "273": "2521",
     "retry policy": "timeout policy", "parse_config": "load_config"},
    {"Lisbon": "Athens", "Porto": "Patras", "Oslo": "Helsinki", "Madrid": "Rome",
     "1450": "990", "3920": "2750", "Reykjavik": "Nuuk", "273": "692",
     "retry policy": "proxy settings", "parse_config": "read_settings"},
]
EDIT_TURNS = [
    "Now add a one-line docstring that says what it returns. Reply with the whole function "
    "in one code block and nothing else.",
    "Now rename its first parameter to `value` everywhere in it. Reply with the whole "
    "function in one code block and nothing else.",
]


def write(name: str, rows: list[dict]) -> None:
    with open(HERE / f"{name}.jsonl", "w", encoding="utf-8") as f:
        for i, row in enumerate(rows):
            split = row.pop("split", "dev" if i % 4 == 3 else "test")
            f.write(json.dumps({"id": row.pop("id"), "split": split, **row}) + "\n")


def json_extract() -> list[dict]:
    rows = []
    for i, (prose, properties) in enumerate(RECORDS):
        schema = {"type": "object", "properties": properties, "required": list(properties)}
        rows.append({"id": f"extract-{i:02d}", "messages": [{"role": "user", "content": (
            "Extract the record from this text as JSON with the keys "
            f"{', '.join(properties)}.\n\n{prose}")}], "json_schema": schema,
            "checker": {"json": True}, "max_tokens": 256})
    return rows


def agents_repeat() -> list[dict]:
    from agents_compare import TOOLS

    conversations = [json.loads(line) for line in
                     (HERE / "agents.jsonl").read_text().splitlines()]
    return [{"id": f"{conv['id']}-{round_}-call", "split": "test",
             "messages": [{"role": "user", "content": conv["user"]}], "tools": TOOLS,
             "tool_choice": "required", "sequence": "agents", "max_tokens": 200}
            for round_, conv in varied(conversations)]


def varied(conversations: list[dict]) -> list[tuple[int, dict]]:
    """Each conversation ({"id", "user"}) as is (round 0), then with each of VARIATIONS'
    small changes to its user message (rounds 1, 2): (round, conversation)."""
    out = []
    for round_, changes in enumerate([{}] + VARIATIONS):
        for conv in conversations:
            user = conv["user"]
            for old, new in changes.items():
                user = user.replace(old, new)
            out.append((round_, {**conv, "user": user}))
    return out


def code_block(edit: dict) -> str:
    """The function a code-edit record asks to change: its first message's code block."""
    first = edit["messages"][0]["content"]
    return first[first.index("```python"):]


def edits_multiturn() -> list[dict]:
    edits = [json.loads(line) for line in (HERE / "code-edit.jsonl").read_text().splitlines()]
    rows = []
    for number, edit in enumerate(edits[:12]):
        split = "dev" if number % 4 == 3 else "test"
        first = edit["messages"][0]["content"]
        code = code_block(edit)
        messages = [{"role": "user", "content": first}]
        rows.append({"id": f"{edit['id']}-1", "messages": list(messages),
                     "sequence": edit["id"], "split": split})
        for turn, ask in enumerate(EDIT_TURNS, 2):
            messages += [{"role": "assistant", "content": code}, {"role": "user",
                                                                  "content": ask}]
            rows.append({"id": f"{edit['id']}-{turn}", "messages": list(messages),
                         "sequence": edit["id"], "split": split})
    return rows


MODULE = '''\
"""A small shop inventory kept in a dict: name -> {"price": float, "qty": int}."""

import json


def load_inventory(path):
    with open(path) as f:
        return json.load(f)


def save_inventory(inventory, path):
    with open(path, "w") as f:
        json.dump(inventory, f, indent=2, sort_keys=True)


def add_item(inventory, name, price, qty):
    if name in inventory:
        inventory[name]["qty"] += qty
        inventory[name]["price"] = price
    else:
        inventory[name] = {"price": price, "qty": qty}
    return inventory[name]


def remove_item(inventory, name, qty):
    item = inventory.get(name)
    if item is None:
        raise KeyError(name)
    if item["qty"] < qty:
        raise ValueError(f"only {item['qty']} of {name} left")
    item["qty"] -= qty
    if item["qty"] == 0:
        del inventory[name]
    return qty


def total_value(inventory):
    total = 0.0
    for item in inventory.values():
        total += item["price"] * item["qty"]
    return total


def low_stock(inventory, threshold=5):
    names = []
    for name, item in sorted(inventory.items()):
        if item["qty"] < threshold:
            names.append(name)
    return names


def report(inventory):
    lines = []
    for name, item in sorted(inventory.items()):
        lines.append(f"{name:<20} {item['qty']:>5} x {item['price']:>8.2f}")
    lines.append(f"{'total':<20} {total_value(inventory):>17.2f}")
    return "\\n".join(lines)
'''
SIX_EDITS = [
    "Add type hints to every function's parameters and return value.",
    "Add a one-line docstring to every function.",
    "Rename the function `remove_item` to `take_item`.",
    "Make `add_item` raise ValueError when `qty` is not a positive integer.",
    "Replace the loop in `total_value` with a call to sum().",
    "Add a function `restock(inventory, name, qty)` at the end that adds qty to an item "
    "that exists and raises KeyError otherwise.",
]


def six_edits() -> list[dict]:
    rows = []
    for number, ask in enumerate(SIX_EDITS, 1):
        content = (f"{ask} Reply with the whole file in one code block and nothing else."
                   f"\n\n```python\n{MODULE}```")
        rows.append({"id": f"inventory-{number}", "split": "test", "max_tokens": 768,
                     "messages": [{"role": "user", "content": content}],
                     "sequence": "inventory"})
    return rows


COPY_ASK = ("Repeat this code exactly as it is, in one Python code block, and write nothing "
            "else.")
COPY_FUNCTIONS = 5  # of code-edit's test split, the longest
COPY_MIN_CHARS = 500


def copy_task() -> list[dict]:
    edits = [json.loads(line) for line in (HERE / "code-edit.jsonl").read_text().splitlines()]
    codes = [("inventory", f"```python\n{MODULE}```")]
    functions = []
    for edit in edits:
        code = code_block(edit)
        if edit["split"] == "test" and len(code) >= COPY_MIN_CHARS:
            functions.append((edit["id"].split("-", 2)[2], code))
    functions.sort(key=lambda item: -len(item[1]))
    codes += functions[:COPY_FUNCTIONS]
    return [{"id": f"copy-{name}", "split": "test", "max_tokens": 768,
             "messages": [{"role": "user", "content": f"{COPY_ASK}\n\n{code}"}]}
            for name, code in codes]


if __name__ == "__main__":
    write("json-extract", json_extract())
    write("agents-repeat", agents_repeat())
    write("edits-multiturn", edits_multiturn())
    write("six-edits", six_edits())
    write("copy", copy_task())
