"""Turn bench measurements into per-configuration summaries, a table, JSON and a plot."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from .prompts import PromptItem

COLUMNS = (("config", "{:<24}", 24), ("tok/s", "{:>6.1f}", 6), ("speedup", "{:>6.2f}x", 7),
           ("[p25-p75]", "{:>11}", 11), ("tau", "{:>5.2f}", 5), ("accept", "{:>6.0%}", 6),
           ("loose", "{:>5.1f}", 5), ("draft/verify/other", "{:>18}", 18),
           ("same", "{:>5.0%}", 5), ("1st diff", "{:>8}", 8), ("pass@1", "{:>6}", 6),
           ("retain", "{:>6}", 6), ("prefill", "{:>6.2f}s", 7), ("RSS MB", "{:>6.0f}", 6),
           ("grammar", "{:>7.1%}", 7))


def score_answers(rows: Sequence[dict], items: Sequence[PromptItem],
                  check: Callable[[str, str], object]) -> None:
    """Add "passed" to first-repetition rows whose prompt has a checker. `check(task_id,
    text)` returns a result with .passed/.status; identical answers are checked once."""
    checkers = {(item.set_name, item.id): item.checker for item in items}
    seen: dict[tuple[str, str], object] = {}
    for row in rows:
        spec = checkers.get((row["set"], row["id"]), {})
        if row["rep"] != 0 or "text" not in row:
            continue
        if spec.get("json"):
            row["passed"] = parses_as_json(row["text"])
            row["check"] = "valid JSON" if row["passed"] else "not JSON"
            continue
        task_id = spec.get("humaneval")
        if task_id is None:
            continue
        key = (task_id, row["text"])
        if key not in seen:
            seen[key] = check(task_id, row["text"])
        row["passed"] = bool(seen[key].passed)
        row["check"] = seen[key].status


def parses_as_json(text: str) -> bool:
    """The `json` checker: the whole answer is one JSON value (json.loads accepts it)."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def summarize(rows: Sequence[dict], baseline: str = "plain") -> list[dict]:
    """One summary per (prompt set, configuration), in first-seen order."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row["set"], row["config"]), []).append(row)
    out = []
    for (set_name, config), group in groups.items():
        base = {(r["id"], r["rep"]): r for r in groups.get((set_name, baseline), [])}
        twin = grammar_baseline(config, baseline)  # quality vs plain under the same grammar
        twin_rows = groups.get((set_name, twin)) if twin != config else None
        same_grammar = {(r["id"], r["rep"]): r for r in twin_rows} if twin_rows else base
        out.append(summarize_group(set_name, config, group, base, same_grammar))
    return out


def summarize_group(set_name: str, config: str, group: list[dict],
                    base: dict[tuple[str, int], dict],
                    quality_base: dict[tuple[str, int], dict] | None = None) -> dict:
    """Speed vs `base` (plain decoding); identical outputs and retention vs `quality_base`
    (default `base`)."""
    ratios = [r["tps"] / base[(r["id"], r["rep"])]["tps"] for r in group
              if (r["id"], r["rep"]) in base and base[(r["id"], r["rep"])]["tps"] > 0]
    s = {"set": set_name, "config": config, "prompts": len({r["id"] for r in group}),
         "runs": len(group), "tps": statistics.median(r["tps"] for r in group),
         "speedup": statistics.median(ratios) if ratios else None,
         "speedup_p25": _quantile(ratios, 0.25), "speedup_p75": _quantile(ratios, 0.75),
         "speedup_per_rep": _per_rep_speedups(group, base)}
    if "tau" in group[0]:
        tokens = sum(r["n_tokens"] for r in group)
        decode = sum(r["draft_s"] + r["verify_s"] + r["other_s"] for r in group) or 1.0
        s.update(tau=statistics.median(r["tau"] for r in group),
                 acceptance=sum(r["accepted"] for r in group) / max(
                     1, sum(r["drafted"] for r in group)),
                 loose_per_100=100 * sum(r["loose"] for r in group) / max(1, tokens),
                 draft_share=sum(r["draft_s"] for r in group) / decode,
                 verify_share=sum(r["verify_s"] for r in group) / decode,
                 other_share=sum(r["other_s"] for r in group) / decode)
        by_source: dict[str, int] = {}
        for row in group:
            for source, count in row.get("accepted_by_source", {}).items():
                by_source[source] = by_source.get(source, 0) + count
        accepted = sum(by_source.values())
        if accepted:  # which share of the accepted tokens each drafter supplied
            s["accepted_share"] = {name: count / accepted for name, count in sorted(
                by_source.items(), key=lambda kv: -kv[1])}
        if any(r.get("constrain_s") for r in group):
            s["grammar_share"] = sum(r.get("constrain_s", 0.0) for r in group) / decode
    if "prefill_s" in group[0]:
        s["prefill_s"] = statistics.median(r["prefill_s"] for r in group)
    if "rss_mb" in group[0]:
        s["rss_mb"] = max(r["rss_mb"] for r in group)
    s.update(quality(group, quality_base if quality_base is not None else base))
    return s


def grammar_baseline(config: str, baseline: str = "plain") -> str:
    """The plain configuration with the same ':grammar=NAME' as `config` (or `baseline`): the
    reference for identical outputs and pass@1 retention of a constrained configuration."""
    grammar = [part for part in config.split(":") if part.startswith("grammar=")]
    return f"{baseline}:{grammar[0]}" if grammar else baseline


def quality(group: list[dict], base: dict[tuple[str, int], dict]) -> dict:
    """Identical-to-baseline share, mean first divergence (tokens) of the differing answers,
    pass@1 and its retention vs the baseline, all on the first repetition."""
    pairs = [(r, base[(r["id"], 0)]) for r in group
             if r["rep"] == 0 and "text" in r and (r["id"], 0) in base]
    if not pairs:
        return {}
    same = [same_answer(r, b) for r, b in pairs]
    diverge = [first_divergence(r["tokens"], b["tokens"])
               for (r, b), eq in zip(pairs, same, strict=True) if not eq]
    out = {"identical": sum(same) / len(same),
           "first_divergence": statistics.mean(diverge) if diverge else None}
    scored = [(r["passed"], b["passed"]) for r, b in pairs if "passed" in r and "passed" in b]
    if scored:
        accuracy = sum(p for p, _ in scored) / len(scored)
        base_accuracy = sum(b for _, b in scored) / len(scored)
        out.update(accuracy=accuracy,
                   retention=accuracy / base_accuracy if base_accuracy else None)
    return out


def same_answer(row: dict, base: dict) -> bool:
    """Whether a run wrote the baseline's text. A run that may write past the token limit
    (llama-speculative-simple commits a whole round) matches when it begins with a
    baseline answer that the limit cut."""
    if row["text"] == base["text"]:
        return True
    return bool(row.get("may_run_past") and base.get("finish_reason") == "length"
                and row["text"].startswith(base["text"]))


def differing_answers(rows: Sequence[dict], baseline: str = "plain") -> list[str]:
    """One line per external command whose answers differ from lsd's plain decoding on some
    prompts (their speed there compares different work), or whose answers were not read, or
    that decoded past --max-tokens (its speed is then counted over the tokens asked)."""
    base = {(r["set"], r["id"], r["rep"]): r for r in rows if r["config"] == baseline}
    counts: dict[str, list[int]] = {}
    for row in rows:
        reference = base.get((row["set"], row["id"], 0))
        if not row.get("external") or row["rep"] != 0 or reference is None:
            continue
        tally = counts.setdefault(row["config"], [0, 0, 0, 0])
        tally[3] += "decoded" in row
        if "text" not in row:
            tally[2] += 1
        else:
            tally[0] += not same_answer(row, reference)
            tally[1] += 1
    out = []
    for config, (differ, read, unread, past) in counts.items():
        if differ:
            out.append(f"{config}: {differ} of {read} answers differ from lsd's plain "
                       "decoding: their speeds compare different answers")
        if unread:
            out.append(f"{config}: {unread} answers could not be read from its output: "
                       "their speeds are not checked against the same text")
        if past:
            out.append(f"{config}: {past} runs decoded past --max-tokens (a whole round "
                       "past -n): their speeds count the tokens asked in the time taken")
    return out


def first_divergence(tokens: Sequence[int], reference: Sequence[int]) -> int:
    """Index of the first differing token (the shorter length if one is a prefix)."""
    for i, (a, b) in enumerate(zip(tokens, reference, strict=False)):
        if a != b:
            return i
    return min(len(tokens), len(reference))


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _per_rep_speedups(group: list[dict], base: dict[tuple[str, int], dict]) -> list[float]:
    reps = sorted({r["rep"] for r in group})
    out = []
    for rep in reps:
        ratios = [r["tps"] / base[(r["id"], rep)]["tps"] for r in group
                  if r["rep"] == rep and (r["id"], rep) in base and base[(r["id"], rep)]["tps"]]
        if ratios:
            out.append(statistics.median(ratios))
    return out


def format_table(summaries: Sequence[dict]) -> str:
    """A fixed-width table, one block per prompt set."""
    width = max([24] + [len(s["config"]) for s in summaries])
    header = " ".join(f"{name:>{w}}" if i else f"{name:<{width}}"
                      for i, (name, _, w) in enumerate(COLUMNS))
    lines = []
    for set_name in dict.fromkeys(s["set"] for s in summaries):
        group = [s for s in summaries if s["set"] == set_name]
        lines += [f"{set_name} ({group[0]['prompts']} prompts)", header]
        lines += [format_row(s, width) for s in group]
        lines.append("")
    return "\n".join(lines)


def format_row(s: dict, config_width: int = 24) -> str:
    def pct(value):
        return "-" if value is None else f"{value:.0%}"

    spread = ("-" if s.get("speedup_p25") is None
              else f"{s['speedup_p25']:.2f}-{s['speedup_p75']:.2f}")
    shares = ("-" if "draft_share" not in s else
              f"{s['draft_share']:.0%}/{s['verify_share']:.0%}/{s['other_share']:.0%}")
    diverge = "-" if s.get("first_divergence") is None else f"{s['first_divergence']:.0f}"
    values = (s["config"], s["tps"], s.get("speedup"), spread, s.get("tau"),
              s.get("acceptance"), s.get("loose_per_100"), shares, s.get("identical"),
              diverge, pct(s.get("accuracy")), pct(s.get("retention")), s.get("prefill_s"),
              s.get("rss_mb"), s.get("grammar_share"))
    cells = [s["config"].ljust(config_width)]
    for (_, fmt, width), value in zip(COLUMNS[1:], values[1:], strict=True):
        cells.append(f"{'-':>{width}}" if value is None else fmt.format(value))
    return " ".join(cells)


def choices(rows: Sequence[dict]) -> list[str]:
    """For configurations whose drafter or K is chosen per round: which drafter the rounds
    used and how long their drafts were, per prompt set."""
    merged: dict[tuple[str, str], tuple[dict, dict]] = {}
    for row in rows:
        if ":auto" not in row["config"] or "draft_sources" not in row:
            continue
        sources, lengths = merged.setdefault((row["set"], row["config"]), ({}, {}))
        for mine, theirs in ((sources, row["draft_sources"]), (lengths, row["draft_lengths"])):
            for key, count in theirs.items():
                mine[key] = mine.get(key, 0) + count
    lines = []
    for (set_name, config), (sources, lengths) in merged.items():
        rounds = sum(sources.values()) or 1
        mix = ", ".join(f"{name} {count / rounds:.0%}"
                        for name, count in sorted(sources.items(), key=lambda kv: -kv[1]))
        hist = " ".join(f"{k}:{count}" for k, count in sorted(lengths.items()))
        lines.append(f"{set_name:<10} {config:<24} rounds by {mix}; rounds per K {hist}")
    return lines


def suppliers(summaries: Sequence[dict]) -> list[str]:
    """Per prompt set and configuration that drafted: which drafter supplied which share of
    the accepted tokens ("forced": the grammar's; "suffix": past requests)."""
    return [f"{s['set']:<10} {s['config']:<24} " + ", ".join(
        f"{name} {share:.0%}" for name, share in s["accepted_share"].items())
        for s in summaries if s.get("accepted_share")]


def sequence_requests(rows: Sequence[dict], baseline: str = "plain") -> list[str]:
    """For the requests of a sequence (an editor's or an agent's requests one after
    another), per configuration that drafts and in order: each request's speedup over the
    baseline on it and the share of its accepted tokens drafted from the earlier requests'
    answers (the suffix index): whether a later request drafted from an earlier one."""
    base = {(r["id"], r["rep"]): r for r in rows if r["config"] == baseline}
    lines = []
    for key in dict.fromkeys((r["set"], r["sequence"], r["config"]) for r in rows
                             if r.get("sequence") is not None and r["config"] != baseline
                             and "accepted_by_source" in r):
        cells = []
        for row in (r for r in rows if (r["set"], r.get("sequence"), r["config"]) == key):
            plain = base.get((row["id"], row["rep"]))
            speedup = f"{row['tps'] / plain['tps']:.2f}x" if plain and plain["tps"] else "-"
            accepted = sum(row["accepted_by_source"].values())
            earlier = row["accepted_by_source"].get("suffix", 0)
            cells.append(f"{row['id']} {speedup} {earlier / accepted if accepted else 0:.0%}")
        lines.append(f"{key[0]:<10} {key[2]:<24} " + ", ".join(cells))
    return lines


def against_external(rows: Sequence[dict], baseline: str = "plain") -> list[str]:
    """Per prompt set and lsd configuration that drafts, when external commands ran: its
    speed over the fastest external drafting command on each prompt (llama.cpp's types;
    those named '...:plain' decode plainly and are left out), as the median over prompts
    and over the prompts where both answers equal the baseline's (same_answer: the like with
    like figure). Speeds are each configuration's median over repeats."""
    speeds: dict[tuple[str, str], dict[str, list[float]]] = {}
    first: dict[tuple[str, str, str], dict] = {}
    for row in rows:
        speeds.setdefault((row["set"], row["id"]), {}).setdefault(row["config"], []).append(
            row["tps"])
        first.setdefault((row["set"], row["id"], row["config"]), row)
    external = {r["config"] for r in rows if r.get("external")
                and not r["config"].endswith(":plain")}
    mine = [c for c in dict.fromkeys(r["config"] for r in rows)
            if c not in external and c != baseline and not c.endswith(":plain")]
    ratios: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    for (set_name, pid), by_config in speeds.items():
        theirs = {c: statistics.median(v) for c, v in by_config.items() if c in external}
        base = first.get((set_name, pid, baseline))
        if not theirs or base is None:
            continue
        fastest = max(theirs, key=theirs.get)
        for config in (c for c in mine if c in by_config and theirs[fastest] > 0):
            ratio = statistics.median(by_config[config]) / theirs[fastest]
            every, equal = ratios.setdefault((set_name, config), ([], []))
            every.append(ratio)
            if all("text" in first[(set_name, pid, c)]  # (a command's answer may be unread)
                   and same_answer(first[(set_name, pid, c)], base) for c in (config, fastest)):
                equal.append(ratio)
    return [f"{set_name:<10} {config:<24} {statistics.median(every):.2f}x median of "
            f"{len(every)} ({min(every):.2f}-{max(every):.2f}); "
            + (f"{statistics.median(equal):.2f}x over the {len(equal)} with equal answers"
               if equal else "no prompt with equal answers")
            for (set_name, config), (every, equal) in ratios.items()]


def write_json(path: Path, meta: dict, rows: Sequence[dict], summaries: Sequence[dict],
               extra: dict | None = None) -> None:
    """Everything measured: settings, per-run rows, summaries and any extra report."""
    data = {"meta": meta, "summaries": list(summaries), "runs": list(rows), **(extra or {})}
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
