#!/usr/bin/env python3
"""Write a corpus whose texts come after a long earlier conversation: the same tasks at depth.

Usage::

    .venv/bin/python benchmarks/deepen_corpus.py build/corpus build/corpus-8000 \\
        --depth 8000 --kinds edit,quote,revise --per-kind 2

Each chosen workload of SRC (as ``make_corpus.py`` writes it) keeps its name (so its
split), kind, temperature and max_tokens; its prompt is preceded by ``--depth`` tokens
(the target's tokenizer) of earlier text: the prompts of SRC's other kinds
(``summarise``, ``code``, ``write``), one after another. That history holds none of
the chosen texts, so what a lookup drafter finds there is the noise a long
conversation gives it, and the copy it can make is the task's own. ``edgespec bench
--corpus OUT --ctx C`` runs them (C at least depth + prompt + max_tokens).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is not a package

from make_corpus import Item, write_corpus  # noqa: E402

from edgespec import load_corpus, split_of  # noqa: E402

HISTORY_KINDS = ("summarise", "code", "write")


def history_text(model, prompts: list[str], depth: int) -> str:
    """The first depth tokens of the prompts, one after another, as text."""
    tokens: list[int] = []
    for p in prompts:
        tokens += model.tokenize(p + "\n\n", add_special=False)
        if len(tokens) >= depth:
            break
    if len(tokens) < depth:
        raise SystemExit(f"the history kinds hold {len(tokens)} tokens, fewer than {depth}")
    data = b"".join(model.token_bytes(t) for t in tokens[:depth])
    return data.decode("utf-8", "ignore")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--depth", type=int, default=8000, help="tokens of earlier text (8000)")
    p.add_argument("--kinds", default="edit,quote,revise", help="kinds to deepen")
    p.add_argument("--per-kind", type=int, default=2, help="texts per kind and split (2)")
    p.add_argument("--model", default="gemma-3-270m", help="whose tokenizer counts the depth")
    args = p.parse_args(argv)
    from edgespec import LlamaModel, resolve_model

    workloads = load_corpus(args.src)
    history = [w.prompt for w in workloads if w.kind in HISTORY_KINDS]
    model = LlamaModel(resolve_model(args.model), n_ctx=256, n_threads=1)
    earlier = history_text(model, history, args.depth)
    items: list[Item] = []
    taken: dict[tuple[str, str], int] = {}
    for w in workloads:
        key = (w.kind, split_of(w.name))
        if w.kind not in args.kinds.split(",") or taken.get(key, 0) >= args.per_kind:
            continue
        taken[key] = taken.get(key, 0) + 1
        items.append(
            Item(
                name=w.name,
                kind=w.kind,
                description=f"{w.description} (after {args.depth} tokens of earlier text)",
                prompt=earlier + "\n\n" + w.prompt,
                source=f"{args.src}/{w.name} after {args.depth} tokens",
                temperature=w.temperature,
                max_tokens=w.max_tokens,
            )
        )
    manifest = write_corpus(args.out, items)
    longest = max(len(model.tokenize(i.prompt)) for i in items)
    for kind, c in manifest["counts"].items():
        print(f"{kind:<10} tuning {c['tuning']}, validation {c['validation']}")
    print(f"{len(items)} workloads in {args.out}; longest prompt {longest} tokens")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
