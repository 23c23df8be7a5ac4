#!/usr/bin/env python3
"""Constrained decoding's speed: free plain, constrained plain, and speculation under a
grammar (gamma auto with the n-gram lookup and grammar drafts), greedy, side by side.

Three workloads, each a list of prompts built here from templates, split in halves
by index (even: tuning, odd: validation; --split picks one):

- ``record-invented``: a 9-key JSON record whose values the model invents;
- ``record-copied``: the same records, their values in the prompt's text (extraction);
- ``tool-call``: a call ``{"name": ..., "arguments": {...}}`` to one of three tools.

Arms, every prompt in every repetition, in rotating order:
``free`` (no grammar, target alone), ``free-same`` (the same, stopped at constrained
plain's output length: the same count of tokens), ``plain`` (the grammar, target alone),
``grammar`` (the grammar drafting alone: forced text and certain rows, no drafter),
``auto`` (the n-gram lookup, gamma auto, grammar drafts: what ``--draft auto`` does),
``auto-nogd`` (the same without grammar drafts).
Ratios are per prompt and repetition: plain / X wall time over the same greedy tokens
(the constrained arms must produce identical tokens: checked), and free's tokens/s
against plain's (their outputs differ; also at the same length, where a generation's
fixed costs weigh the same per token). Medians with min and max.

    .venv/bin/python benchmarks/bench_constrained.py --reps 5 --split validation \\
        --json docs/bench/constrained.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from edgespec import Grammar, LlamaModel, ModelPair, NgramDrafter, load_or_measure, resolve_model

PEOPLE = [
    ("Ada Okafor", 34, "engineer", "Lagos", "ada.okafor@example.org", True, "gold", 7, "chess"),
    ("Bruno Lind", 51, "teacher", "Uppsala", "bruno.lind@example.se", False, "silver", 3,
     "sailing"),
    ("Chen Wei", 28, "designer", "Chengdu", "chen.wei@example.cn", True, "bronze", 12, "tea"),
    ("Dara Quinn", 45, "nurse", "Galway", "dara.quinn@example.ie", True, "gold", 1, "hurling"),
    ("Emil Novak", 39, "chef", "Brno", "emil.novak@example.cz", False, "none", 5, "mushrooms"),
    ("Fatima Zahra", 23, "student", "Fes", "fatima.z@example.ma", True, "silver", 9, "poetry"),
    ("Gus Ortega", 62, "pilot", "Quito", "gus.ortega@example.ec", False, "gold", 2, "birds"),
    ("Hana Sato", 31, "architect", "Sendai", "hana.sato@example.jp", True, "bronze", 4, "go"),
]  # fmt: skip
KEYS = ("name", "age", "job", "city", "email", "active", "tier", "visits", "hobby")
RECORD = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "job": {"type": "string", "maxLength": 30},
        "city": {"type": "string", "maxLength": 30},
        "email": {"type": "string", "format": "email"},
        "active": {"type": "boolean"},
        "tier": {"enum": ["gold", "silver", "bronze", "none"]},
        "visits": {"type": "integer", "minimum": 0, "maximum": 1000},
        "hobby": {"type": "string", "maxLength": 30},
    },
    "required": list(KEYS),
    "additionalProperties": False,
}
TOOLS = {
    "get_weather": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer", "minimum": 1,
                                                              "maximum": 14}},
        "required": ["city", "unit", "days"], "additionalProperties": False},
    "send_email": {"type": "object", "properties": {
        "to": {"type": "string", "format": "email"}, "subject": {"type": "string", "maxLength": 60},
        "body": {"type": "string", "maxLength": 200}},
        "required": ["to", "subject", "body"], "additionalProperties": False},
    "read_file": {"type": "object", "properties": {
        "path": {"type": "string", "maxLength": 120}, "max_lines": {"type": "integer",
                                                                   "minimum": 1, "maximum": 500}},
        "required": ["path", "max_lines"], "additionalProperties": False},
}  # fmt: skip
CALL = {"anyOf": [
    {"type": "object", "properties": {"name": {"const": name}, "arguments": params},
     "required": ["name", "arguments"], "additionalProperties": False}
    for name, params in TOOLS.items()]}  # fmt: skip
ASKS = [
    "What will the weather be in Porto for the next 3 days, in celsius?",
    "Email mia@example.com that the release is out, subject 'v2.1'.",
    "Show me the first 40 lines of /etc/nginx/nginx.conf.",
    "Is it going to snow in Calgary this week? Fahrenheit please.",
    "Tell jon@example.net the meeting moved to 3pm.",
    "Open ./src/edgespec/engine.py, 120 lines.",
    "Forecast for Hobart, 5 days, celsius.",
    "Read the last log file /var/log/syslog, 200 lines.",
]


def workloads() -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """kind -> [(prompt, schema)]."""
    # no example record in the prompt: a base model would copy it into "invented" values
    invented = [
        (f"The club's members, one JSON record each (name, age, job, city, email, active, "
         f"tier, visits, hobby). Invent a new member who is a {p[2]} from {p[3]}:\n", RECORD)
        for p in PEOPLE[:-1]
    ]  # fmt: skip
    copied = [
        (f"{p[0]} is a {p[1]}-year-old {p[2]} living in {p[3]} (email {p[4]}). "
         f"Membership {'active' if p[5] else 'lapsed'}, tier {p[6]}, {p[7]} visits so far; "
         f"loves {p[8]}.\nTheir record as JSON (name, age, job, city, email, active, tier, "
         f"visits, hobby):\n", RECORD)
        for p in PEOPLE[:-1]
    ]  # fmt: skip
    tools = "Tools: " + json.dumps({k: v["properties"] for k, v in TOOLS.items()})
    calls = [(f"{tools}\nUser: {ask}\nCall:\n", CALL) for ask in ASKS]
    return {"record-invented": invented, "record-copied": copied, "tool-call": calls}


def split(items: list, which: str) -> list:
    """Even indices are the tuning half, odd the validation half."""
    return [x for i, x in enumerate(items) if (i % 2 == 0) == (which == "tuning")]


ARMS = ("free", "free-same", "plain", "grammar", "auto", "auto-nogd")


def run_arm(target: LlamaModel, arm: str, prompt: str, grammar: Grammar, max_tokens: int):
    """(seconds, DoneEvent) of one generation."""
    kw: dict[str, Any] = {"max_tokens": max_tokens}
    if not arm.startswith("free"):
        kw["grammar"] = grammar
    if arm in ("free", "free-same", "plain"):
        pair = ModelPair(target, None, history=False)
        kw.update(grammar_drafts=False)
    elif arm == "grammar":
        pair = ModelPair(target, None, history=False)
        kw.update(grammar_drafts=True)
    else:
        pair = ModelPair(target, NgramDrafter(), history=False)
        kw.update(gamma="auto", grammar_drafts=arm == "auto")
    t0 = time.perf_counter()
    done = pair.generate(prompt, **kw)
    return time.perf_counter() - t0, done


def mask_times(target: LlamaModel, grammar: Grammar, tokens: list[int]) -> list[float]:
    """Milliseconds of each full-vocabulary mask along an output (a fresh state each)."""
    matcher, out = target.grammar(grammar.spec), []
    for tok in tokens:
        t0 = time.perf_counter()
        matcher.mask()
        out.append(1e3 * (time.perf_counter() - t0))
        if target.is_eog(tok):
            break
        matcher.accept(tok)
    return out


def _summary(xs: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3),
            "max": round(max(xs), 3), "n": len(xs)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--split", choices=("tuning", "validation"), default="validation")
    ap.add_argument("--max-tokens", type=int, default=120)
    ap.add_argument("--kinds", default="record-invented,record-copied,tool-call")
    ap.add_argument("--json", help="append the report to this JSON-lines file")
    args = ap.parse_args()
    target = LlamaModel(str(resolve_model(args.model)), n_ctx=2048, n_threads=args.threads)
    load_or_measure(target)  # the verify-cost curve, measured now if not cached
    t0 = time.perf_counter()
    target.prepare_grammar()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    target.prepare_grammar()
    print(f"grammar tokenizer: {first:.2f} s to build, {time.perf_counter() - t0:.4f} s again")
    masks: list[float] = []
    report: dict[str, Any] = {"model": args.model, "threads": args.threads, "reps": args.reps,
                              "split": args.split, "kinds": {}}  # fmt: skip
    for kind in args.kinds.split(","):
        prompts = split(workloads()[kind], args.split)
        grammars = [Grammar.from_json_schema(schema) for _, schema in prompts]
        lengths = []  # constrained plain's output length: free-same stops there
        for (prompt, _), g in zip(prompts, grammars, strict=True):  # warm: caches, tokenizer
            for arm in ARMS:
                _, done = run_arm(target, arm, prompt, g, args.max_tokens)
                if arm == "plain":
                    lengths.append(len(done.tokens))
        ratios: dict[str, list[float]] = {a: [] for a in ARMS if a != "plain"}
        identical, stats = True, {a: [0, 0, 0, 0] for a in ARMS}
        for rep in range(args.reps):
            for i, ((prompt, _), g) in enumerate(zip(prompts, grammars, strict=True)):
                order = ARMS[(rep + i) % len(ARMS) :] + ARMS[: (rep + i) % len(ARMS)]
                took, done = {}, {}
                for arm in order:
                    n = lengths[i] if arm == "free-same" else args.max_tokens
                    took[arm], done[arm] = run_arm(target, arm, prompt, g, n)
                    s = done[arm].stats
                    stats[arm][0] += s.generated
                    stats[arm][1] += s.target_calls
                    stats[arm][2] += s.forced
                    stats[arm][3] += s.accepted + s.grammar_accepted
                if rep == 0:
                    masks += mask_times(target, g, list(done["plain"].tokens))
                for arm in ("grammar", "auto", "auto-nogd"):
                    identical &= done[arm].tokens == done["plain"].tokens
                    ratios[arm].append(took["plain"] / took[arm])
                # free's output differs: tokens per second, free / plain (>= 1: plain slower)
                tps = {a: len(done[a].tokens) / took[a] for a in ("free", "free-same", "plain")}
                ratios["free"].append(tps["plain"] / tps["free"])
                # ... and free stopped at plain's length (the same count of tokens)
                ratios["free-same"].append(tps["plain"] / tps["free-same"])
        report["kinds"][kind] = {
            "prompts": len(prompts),
            "identical": identical,
            "plain_tps_over_free": _summary(ratios["free"]),
            "plain_tps_over_free_same_length": _summary(ratios["free-same"]),
            **{f"{a}_speedup": _summary(ratios[a]) for a in ("grammar", "auto", "auto-nogd")},
            "totals": {
                a: dict(zip(("tokens", "target_calls", "forced", "accepted"), v, strict=True))
                for a, v in stats.items()
            },  # fmt: skip
        }
        r = report["kinds"][kind]
        same = r["plain_tps_over_free_same_length"]
        print(f"{kind}: plain/free tok/s {r['plain_tps_over_free']['median']:.3f} "
              f"[{r['plain_tps_over_free']['min']:.3f}, {r['plain_tps_over_free']['max']:.3f}]; "
              f"at the same length {same['median']:.3f} [{same['min']:.3f}, {same['max']:.3f}]; "
              + "; ".join(f"{a} {r[a + '_speedup']['median']:.3f}x "
                          f"[{r[a + '_speedup']['min']:.3f}, {r[a + '_speedup']['max']:.3f}]"
                          for a in ("grammar", "auto", "auto-nogd"))
              + f"; identical {identical}", flush=True)  # fmt: skip
    report["mask_ms"] = {"median": round(statistics.median(masks), 4),
                         "max": round(max(masks), 3), "n": len(masks)}  # fmt: skip
    report["tokenizer_s"] = {"first": round(first, 3)}
    print(f"mask: median {report['mask_ms']['median']} ms, max {report['mask_ms']['max']} ms "
          f"over {len(masks)} states ({target.n_vocab} tokens)")
    target.close()
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
