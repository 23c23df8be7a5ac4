#!/usr/bin/env python3
"""Cross-request lookup: decode speed with the lookup history vs the per-request lookup alone.

Each arm is one CompletionSession (n-gram drafting, gamma auto, greedy) over the same
loaded target, fed in order:

- ``chat``: a chat of 6 turns revising one function, each request the whole
  conversation (what the TUI and OpenAI clients send);
- ``chat_window``: the same turns from a client that sends only the last exchange
  and the new message (the code from two turns ago is in no prompt);
- ``code_editing``: the bench's single-request workload (the file rewritten), with
  the history holding only the chats: a workload it should not slow;
- ``infill``: an editor's 20 completions at the end of one file as its text grows
  (orders.py, a few lines more each time; prefix-only: Gemma 3 has no FIM tokens);
- ``infill_lines``: an editor whose user takes each suggestion a line at a time
  (llama.vim's Shift+Tab, llama.vscode's "accept line"): 20 completions, each from
  the file as it was plus the first line of the last suggestion (or the file's own
  next line where the suggestion's first line was empty), so the rest of the last
  suggestion is in no prompt.

Arms alternate A B A B; per workload the medians of decode tok/s (generated tokens
over decode time, prompt processing left out) are printed with their ratio. Greedy
outputs are checked to be the same in both arms.

    .venv/bin/python benchmarks/bench_history.py --threads 2 --reps 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

from edgespec import (
    DEFAULT_MAX_LINES,
    CodeRules,
    CompletionRequest,
    CompletionResult,
    CompletionSession,
    LlamaModel,
    LookupHistory,
    NgramDrafter,
    SamplingParams,
    builtin_workloads,
    resolve_model,
)

FUNCTION = """def median(values):
    ordered = sorted(values)
    n = len(ordered)
    middle = n // 2
    if n % 2 == 1:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
"""
TURNS = (
    "Here is a Python function:\n\n```python\n" + FUNCTION + "```\n\nAdd type hints to it. "
    "Reply with the whole function in a code block.",
    "Now make it raise ValueError on an empty input. Reply with the whole function.",
    "Add a docstring that explains the even case. Reply with the whole function.",
    "Rename it to middle_value and keep everything else. Reply with the whole function.",
    "Make it accept any iterable, not only lists. Reply with the whole function.",
    "Add two doctest examples to the docstring. Reply with the whole function.",
)
WORKLOADS = ("chat", "chat_window", "code_editing", "infill", "infill_lines")
INFILL_REQUESTS = 20


def orders_file() -> str:
    prompt = builtin_workloads()["code_editing"].prompt
    return prompt.split("```python\n")[1].split("```")[0]


def run_request(session: CompletionSession, req: CompletionRequest) -> CompletionResult:
    result = None
    for item in session.run(req):
        if isinstance(item, CompletionResult):
            result = item
    assert result is not None
    PROMPTS.append(list(req.prompt))
    return result


PROMPTS: list[list[int]] = []  # every request's prompt, in order (for --replay)


def chat(session: CompletionSession, *, window: bool, max_tokens: int) -> list[CompletionResult]:
    messages: list[dict[str, str]] = []
    out = []
    for turn in TURNS:
        messages.append({"role": "user", "content": turn})
        sent = messages[-3:] if window else messages
        res = run_request(session, CompletionRequest(session.chat_prompt(sent), max_tokens))
        messages.append({"role": "assistant", "content": res.text})
        out.append(res)
    return out


def infill(session: CompletionSession, *, max_tokens: int) -> list[CompletionResult]:
    lines = orders_file().splitlines(keepends=True)
    first, last = len(lines) // 6, len(lines) - 2
    out = []
    for i in range(INFILL_REQUESTS):
        cut = first + (last - first) * i // (INFILL_REQUESTS - 1)
        fp = session.fim_prompt("".join(lines[:cut]), "", max_tokens=max_tokens)
        rules = CodeRules("", fp.prefix_at_line_start, DEFAULT_MAX_LINES)
        out.append(run_request(session, CompletionRequest(fp.tokens, max_tokens, code=rules)))
    return out


def infill_lines(session: CompletionSession, *, max_tokens: int) -> list[CompletionResult]:
    lines = orders_file().splitlines(keepends=True)
    cut = len(lines) // 6
    prefix = "".join(lines[:cut])
    out = []
    for _ in range(INFILL_REQUESTS):
        fp = session.fim_prompt(prefix, "", max_tokens=max_tokens)
        rules = CodeRules("", fp.prefix_at_line_start, DEFAULT_MAX_LINES)
        res = run_request(session, CompletionRequest(fp.tokens, max_tokens, code=rules))
        out.append(res)
        first = res.text.split("\n", 1)[0]
        if first.strip() and "\n" in res.text:
            prefix += first + "\n"  # the user accepts the suggestion's first line
        elif cut < len(lines):
            prefix += lines[cut]  # nothing worth taking: the user types the next line
            cut += 1
    return out


def code_editing(session: CompletionSession, *, max_tokens: int) -> list[CompletionResult]:
    w = builtin_workloads()["code_editing"]
    req = CompletionRequest(session.text_prompt(w.prompt), min(max_tokens, w.max_tokens))
    return [run_request(session, req)]


def run_arm(target: LlamaModel, history: bool, args) -> dict[str, dict]:
    target.reset()
    session = CompletionSession(target, NgramDrafter(), gamma="auto", name="t", history=history)
    out = {}
    for name in args.workloads:
        PROMPTS.clear()
        t0 = time.perf_counter()
        if name == "chat":
            results = chat(session, window=False, max_tokens=args.chat_tokens)
        elif name == "chat_window":
            results = chat(session, window=True, max_tokens=args.chat_tokens)
        elif name == "code_editing":
            results = code_editing(session, max_tokens=args.edit_tokens)
        elif name == "infill_lines":
            results = infill_lines(session, max_tokens=args.infill_tokens)
        else:
            results = infill(session, max_tokens=args.infill_tokens)
        generated = sum(r.stats.generated for r in results)
        decode_s = sum(r.stats.decode_s for r in results)
        out[name] = {
            "tok_s": generated / decode_s if decode_s else 0.0,
            "generated": generated,
            "decode_s": decode_s,
            "wall_s": time.perf_counter() - t0,
            "drafted": sum(r.stats.drafted for r in results),
            "accepted": sum(r.stats.accepted for r in results),
            "target_calls": sum(r.stats.target_calls for r in results),
            "tokens": [list(r.tokens) for r in results],
            "prompts": list(PROMPTS),
        }
        if args.verbose:
            calls = out[name]["target_calls"]
            print(
                f"  {name}: {generated} tokens, {out[name]['tok_s']:.1f} tok/s, "
                f"{generated / max(calls, 1):.2f} tokens per target call",
                flush=True,
            )
    return out


def replay(run: dict[str, dict], gamma: int) -> dict[str, dict[str, dict[str, float]]]:
    """Drafts replayed over one run's greedy outputs, no model run: per workload and
    lookup, target calls a fixed-gamma decode would make (every proposal verified,
    accepted as far as it agrees with the output) and proposed/accepted tokens.
    Independent of the machine's load and of the adaptive policy."""
    rng = np.random.default_rng(0)
    greedy = SamplingParams()
    out: dict[str, dict[str, dict[str, float]]] = {}
    for arm in ("history", "per-request"):
        history = LookupHistory() if arm == "history" else None
        out[arm] = {}
        for name, w in run.items():
            calls = proposed = accepted = generated = 0
            for prompt, output in zip(w["prompts"], w["tokens"], strict=True):
                drafter = NgramDrafter(history=history)
                pos = 0
                while pos < len(output):
                    n = min(gamma, len(output) - pos)
                    draft = drafter.propose([*prompt, *output[:pos]], n, greedy, rng).tokens
                    a = 0
                    while a < len(draft) and draft[a] == output[pos + a]:
                        a += 1
                    proposed, accepted = proposed + len(draft), accepted + a
                    pos, calls = pos + a + 1, calls + 1
                generated += len(output)
                if history is not None:
                    history.add([*prompt, *output])
            out[arm][name] = {
                "tokens_per_call": generated / max(calls, 1),
                "proposed": proposed,
                "accepted": accepted,
            }
    return out


def print_replay(run: dict[str, dict], gamma: int) -> None:
    rep = replay(run, gamma)
    print(f"replayed drafts, gamma {gamma} (no model run): tokens per target call")
    print(f"{'workload':<13} {'history':>8} {'per-req':>8} {'ratio':>6}  accepted/proposed (h | p)")
    for w in run:
        h, q = rep["history"][w], rep["per-request"][w]
        print(
            f"{w:<13} {h['tokens_per_call']:8.2f} {q['tokens_per_call']:8.2f} "
            f"{h['tokens_per_call'] / q['tokens_per_call']:6.2f}x  "
            f"{h['accepted']}/{h['proposed']} | {q['accepted']}/{q['proposed']}"
        )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=2, help="A B pairs")
    p.add_argument("--chat-tokens", type=int, default=200)
    p.add_argument("--infill-tokens", type=int, default=64)
    p.add_argument("--edit-tokens", type=int, default=640, help="code_editing's max tokens")
    p.add_argument("--verbose", action="store_true", help="a line per workload run")
    p.add_argument(
        "--workloads", default=",".join(WORKLOADS), help="comma-separated, run in this order"
    )
    p.add_argument("--json", help="write the per-run figures here")
    p.add_argument("--replay", metavar="JSON", help="only replay the drafts over a saved run")
    p.add_argument("--replay-gamma", type=int, default=16)
    p.add_argument("--no-warmup", dest="warmup", action="store_false")
    p.add_argument(
        "--arms", default="history,per-request", help="per-request alone: outputs to replay"
    )
    args = p.parse_args()
    args.workloads = [w for w in args.workloads.split(",") if w]
    if unknown := set(args.workloads) - set(WORKLOADS):
        p.error(f"unknown workloads: {', '.join(sorted(unknown))}")
    if args.replay:
        with open(args.replay, encoding="utf-8") as f:
            saved = json.load(f)
        print_replay(saved["per-request"][0], args.replay_gamma)
        return 0
    print(f"load before: {os.getloadavg()}")
    target = LlamaModel(resolve_model(args.model), n_ctx=8192, n_threads=args.threads)
    if args.warmup:  # the first session measures the cost curve between rounds: not timed
        warm = argparse.Namespace(**{**vars(args), "workloads": ["chat"], "verbose": False})
        run_arm(target, False, warm)
        print(f"warmed up (a chat, per-request); load {os.getloadavg()}", flush=True)
    runs: dict[str, list[dict]] = {"history": [], "per-request": []}
    for rep in range(args.reps):
        for arm in args.arms.split(","):
            res = run_arm(target, arm == "history", args)
            runs[arm].append(res)
            line = "  ".join(f"{w} {res[w]['tok_s']:.1f}" for w in args.workloads)
            print(f"rep {rep + 1} {arm:>11}: {line}  (tok/s)", flush=True)
    print(f"load after: {os.getloadavg()}")
    print(f"{'workload':<13} {'history':>8} {'per-req':>8} {'ratio':>6}  accepted/drafted (h | p)")
    for w in args.workloads if all(runs.values()) else ():
        a = statistics.median(r[w]["tok_s"] for r in runs["history"])
        b = statistics.median(r[w]["tok_s"] for r in runs["per-request"])
        same = all(
            r[w]["tokens"] == runs["per-request"][0][w]["tokens"]
            for arm in runs.values()
            for r in arm
        )
        h, q = runs["history"][0][w], runs["per-request"][0][w]
        print(
            f"{w:<13} {a:8.1f} {b:8.1f} {a / b:6.2f}x  "
            f"{h['accepted']}/{h['drafted']} | {q['accepted']}/{q['drafted']}"
            f"  tokens {h['generated']}{'' if same else '  OUTPUTS DIFFER'}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(runs, f)
    if runs["per-request"]:
        print_replay(runs["per-request"][0], args.replay_gamma)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
