"""edgespec's n-gram drafting against llama-server's, per text: the ratios and their goals.

For each workload that ran ``ngram auto`` (edgespec's default: prompt lookup with
gamma auto) and llama-server (``llamaserver``), three ratios, each the median of the
per-repetition ratios (repetition i of one configuration against repetition i of the
other: they ran side by side, alternating) with their minimum and maximum:

- ``vs_best``: decode tok/s against the best of llama-server's n-gram types on that
  text (the one with the highest median tok/s, chosen per text);
- ``vs_plain``: decode tok/s against llama-server's plain decoding (``--spec-type
  none``);
- ``reply_vs_best``: time to the whole reply (prompt and decode) of llama-server's
  fastest configuration on that text (plain or any n-gram type, by median) over
  edgespec's (above 1: edgespec's reply is done sooner).

The goals (issue 51), judged per split (a corpus's tuning and validation halves): the
median over texts of vs_best at least VS_BEST (1.15x), vs_plain at least VS_PLAIN
(0.97x) on every text, the median of reply_vs_best at least REPLY_VS_BEST (1.1x).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .corpus import SPLITS, split_of
from .llamaserver import PLAIN_TYPE, SERVER
from .stats import median, paired_ratios

AUTO = "ngram auto"
VS_BEST = 1.15
VS_PLAIN = 0.97
REPLY_VS_BEST = 1.10
MIN_REPS = 5  # the goals are judged from at least 5 alternating repetitions


def _spread(a: Sequence[float | None], b: Sequence[float | None]) -> dict[str, Any] | None:
    """Median, min and max of the per-repetition ratios a/b; None where none paired."""
    r = paired_ratios(a, b)
    if not r:
        return None
    return {"median": median(r), "min": min(r), "max": max(r), "n": len(r)}


def compare_text(w: Mapping[str, Any]) -> dict[str, Any] | None:
    """One workload's ratios against llama-server (None: it did not run both)."""
    rows = w["configs"]
    servers = {k: v for k, v in rows.items() if v.get("kind") == SERVER and v.get("reps")}
    auto = rows.get(AUTO)
    if not servers or auto is None or not auto.get("reps"):
        return None
    ngram = {k: v for k, v in servers.items() if v["gamma"] != PLAIN_TYPE}
    plain = next((k for k, v in servers.items() if v["gamma"] == PLAIN_TYPE), None)
    out: dict[str, Any] = {
        "auto_tokens_per_second": auto["tokens_per_second"],
        "reps": auto["reps"],
    }
    if ngram:
        best = max(ngram, key=lambda k: ngram[k]["tokens_per_second"])
        out["best_type"] = ngram[best]["gamma"]
        out["best_tokens_per_second"] = ngram[best]["tokens_per_second"]
        out["vs_best"] = _spread(
            auto["tokens_per_second_all"], ngram[best]["tokens_per_second_all"]
        )
    if plain is not None:
        out["server_plain_tokens_per_second"] = servers[plain]["tokens_per_second"]
        out["vs_plain"] = _spread(
            auto["tokens_per_second_all"], servers[plain]["tokens_per_second_all"]
        )
    replies = {k: v for k, v in servers.items() if any(v.get("reply_s_all") or [])}
    if replies and any(auto.get("reply_s_all") or []):
        fastest = min(
            replies, key=lambda k: median(x for x in replies[k]["reply_s_all"] if x is not None)
        )
        out["reply_best_type"] = replies[fastest]["gamma"]
        out["reply_s"] = median(x for x in auto["reply_s_all"] if x is not None)
        out["reply_best_s"] = median(x for x in replies[fastest]["reply_s_all"] if x is not None)
        out["reply_vs_best"] = _spread(replies[fastest]["reply_s_all"], auto["reply_s_all"])
    return out


def goals(texts: Mapping[str, Mapping[str, Any]], split: str | None) -> list[dict[str, Any]]:
    """The three goals over the texts of one split (None: all texts)."""
    rows = [t for n, t in texts.items() if split is None or split_of(n) == split]
    out: list[dict[str, Any]] = []
    few = sum(1 for t in rows if t["reps"] < MIN_REPS)

    def add(goal: str, key: str, how: str, threshold: float) -> None:
        vals = [t[key]["median"] for t in rows if t.get(key)]
        if not vals:
            return
        value = median(vals) if how == "median" else min(vals)
        g = {"split": split or "all", "goal": goal, "value": value, "threshold": threshold,
             "texts": len(vals), "met": value >= threshold if not few else None}  # fmt: skip
        if few:
            g["not_judged"] = f"{few} text(s) with fewer than {MIN_REPS} repetitions"
        out.append(g)

    add("ngram auto / llama-server's best n-gram type: median", "vs_best", "median", VS_BEST)
    add("ngram auto / llama-server plain: worst text", "vs_plain", "min", VS_PLAIN)
    add("whole reply: llama-server's best / ngram auto: median", "reply_vs_best", "median",
        REPLY_VS_BEST)  # fmt: skip
    return out


def comparison(report: Mapping[str, Any]) -> dict[str, Any] | None:
    """The report's llama-server section: per text and the goals (per split for a corpus)."""
    texts = {}
    for name, w in report.get("workloads", {}).items():
        c = compare_text(w)
        if c is not None:
            texts[name] = c
    if not texts:
        return None
    splits: Sequence[str | None] = SPLITS if report.get("corpus") else (None,)
    return {"texts": texts, "goals": [g for s in splits for g in goals(texts, s)]}


def _r(s: Mapping[str, Any] | None) -> str:
    return "-" if not s else f"{s['median']:.2f}x [{s['min']:.2f}-{s['max']:.2f}]"


def comparison_text(c: Mapping[str, Any], corpus: bool) -> str:
    """The llama-server section as Markdown: every text's ratios, then the goals."""
    head = ["text", *(["split"] if corpus else []), "ngram auto tok/s",
            "best llama-server n-gram (tok/s)", "auto / best [min-max]",
            "llama-server plain tok/s", "auto / plain [min-max]",
            "whole reply s: auto, llama-server best (type)",
            "reply: best / auto [min-max]"]  # fmt: skip
    lines = [
        "## Against llama-server (medians of per-repetition ratios, [min-max] over them)",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    order = sorted(c["texts"], key=lambda n: (split_of(n) if corpus else "", n))
    for name in order:
        t = c["texts"][name]
        best = f"{t['best_type']} ({t['best_tokens_per_second']:.1f})" if "best_type" in t else "-"
        plain = t.get("server_plain_tokens_per_second")
        reply = "-"
        if "reply_s" in t:
            reply = f"{t['reply_s']:.2f}, {t['reply_best_s']:.2f} ({t['reply_best_type']})"
        cells = [name, *([split_of(name)] if corpus else []),
                 f"{t['auto_tokens_per_second']:.1f}", best, _r(t.get("vs_best")),
                 "-" if plain is None else f"{plain:.1f}", _r(t.get("vs_plain")), reply,
                 _r(t.get("reply_vs_best"))]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    if c["goals"]:
        lines += [
            "",
            "| split | goal | texts | measured | needed | met |",
            "|---|---|---|---|---|---|",
        ]
        for g in c["goals"]:
            met = f"not judged ({g['not_judged']})" if g["met"] is None else (
                "yes" if g["met"] else "**no**")  # fmt: skip
            lines.append(f"| {g['split']} | {g['goal']} | {g['texts']} | {g['value']:.3f}x | "
                         f"{g['threshold']:.2f}x | {met} |")  # fmt: skip
    return "\n".join(lines)
