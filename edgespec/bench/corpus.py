"""A corpus of workloads and the distribution of speed-ups over it.

A corpus is a folder of workload files (``benchmarks/make_corpus.py`` writes one from
text every Debian machine with Python has), each with a ``kind`` (edit, quote,
summarise, code, revise, write). Every workload belongs to the tuning or the
validation half by a hash of its name (``split_of``), so the split is fixed
before any result is seen and never depends on which other files exist.

``distribution`` turns a bench report over a corpus into per-text ratios
(adaptive over plain, over the best fixed gamma, over llama-lookup at its best
draft length) and per split and kind their median, 10th percentile and worst,
and judges the corpus goals on each half (the validation half is the one that
counts).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InvalidParameterError
from .stats import MIN_REPS, median, median_interval, paired_ratios
from .workloads import Workload, parse_workload

TUNING = "tuning"
VALIDATION = "validation"
SPLITS = (TUNING, VALIDATION)
COPY_HEAVY = ("edit", "quote", "revise")  # kinds whose output copies the prompt
ALL_KINDS = "all"

# the corpus goals (issue 18), judged on the validation half
NEVER_LOSES = 0.97  # every text: auto >= 0.97x plain
NEAR_BEST_MEDIAN = 0.98  # auto / best fixed gamma: median
CONFIDENCE = 0.90  # the level of a text's interval for auto / plain (n >= 5 repetitions)
NEAR_BEST_FLOOR = 0.92  # ... and at least this on NEAR_BEST_SHARE of the texts
NEAR_BEST_SHARE = 0.90
VS_LOOKUP_COPY = 1.25  # auto / llama-lookup's best, median on each copy-heavy kind

# the ratios reported per text, as (key, heading)
METRICS = (
    ("auto_vs_plain", "auto / plain"),
    ("auto_vs_best_fixed", "auto / best fixed"),
    ("auto_vs_lookup", "auto / llama-lookup best"),
)


def split_of(name: str) -> str:
    """The half a workload belongs to: tuning when sha256(name) is even, else validation."""
    return TUNING if hashlib.sha256(name.encode("utf-8")).digest()[-1] % 2 == 0 else VALIDATION


def load_corpus(folder: Path, split: str = "all") -> list[Workload]:
    """The workloads in folder (every ``*.toml`` below it, by path), those of one split
    (``tuning``, ``validation``) or ``all``; raises InvalidParameterError for a missing
    folder, an unreadable or bad file, a name used twice, or nothing selected."""
    if split not in (*SPLITS, "all"):
        raise InvalidParameterError(f"--split must be tuning, validation or all, got {split!r}")
    if not folder.is_dir():
        raise InvalidParameterError(f"--corpus: no such folder {folder}")
    picked: dict[str, Workload] = {}
    for path in sorted(folder.rglob("*.toml")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidParameterError(f"cannot read workload {path}: {e}") from None
        w = parse_workload(text, default_name=path.stem)
        if w.name in picked:
            raise InvalidParameterError(f"workload {w.name!r} is in the corpus twice ({path})")
        if split == "all" or split_of(w.name) == split:
            picked[w.name] = w
    if not picked:
        raise InvalidParameterError(f"--corpus: no {split} workloads (*.toml) in {folder}")
    return list(picked.values())


def percentile(values: Iterable[float], q: float) -> float | None:
    """The nearest-rank q-quantile (0 < q <= 1): the smallest value with at least a
    share q of the values at or below it; None for no values. With fewer than ten
    values the 10th percentile is the minimum."""
    vals = sorted(values)
    if not vals:
        return None
    return vals[max(0, math.ceil(q * len(vals)) - 1)]


def describe(values: Sequence[float]) -> dict[str, Any]:
    """n, median, 10th percentile (nearest rank) and worst (minimum) of values."""
    vals = list(values)
    if not vals:
        return {"n": 0, "median": None, "p10": None, "worst": None}
    return {"n": len(vals), "median": median(vals), "p10": percentile(vals, 0.10),
            "worst": min(vals)}  # fmt: skip


def main_drafter(report: Mapping[str, Any]) -> str | None:
    """The drafter the distribution is about: ngram if it ran, else the first one."""
    drafters = list(report.get("drafters", {}))
    if "ngram" in drafters:
        return "ngram"
    return drafters[0] if drafters else None


def text_ratios(report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per workload: kind, split, plain tok/s and spread, and the three ratios (None
    where not measured) for the main drafter's ``auto``; each ratio is the median of
    per-repetition ratios, as in the per-workload tables."""
    drafter = main_drafter(report)
    out: dict[str, dict[str, Any]] = {}
    for name, w in report.get("workloads", {}).items():
        a = w.get("auto", {}).get(drafter, {}) if drafter else {}
        plain = w["configs"].get("plain", {})
        auto = w["configs"].get(f"{drafter} auto", {})
        ratios = paired_ratios(
            auto.get("tokens_per_second_all", []), plain.get("tokens_per_second_all", [])
        )
        out[name] = {
            "kind": w.get("kind") or "",
            "split": split_of(name),
            "plain_tokens_per_second": plain.get("tokens_per_second"),
            "plain_spread": w.get("plain_spread"),
            "reps": a.get("reps", 0),
            "over_ceiling": bool(a.get("over_ceiling")),
            "auto_vs_plain": a.get("speedup"),
            # where the median paired ratio lies, at CONFIDENCE (None: too few repetitions)
            "auto_vs_plain_interval": median_interval(ratios, CONFIDENCE),
            "auto_vs_best_fixed": a.get("vs_best_fixed"),
            "best_fixed_gamma": a.get("best_fixed_gamma"),
            "auto_vs_lookup": w.get("vs_llama_lookup") if drafter == "ngram" else None,
            "lookup_best": w.get("llama_lookup_best") if drafter == "ngram" else None,
        }
    return out


def by_kind(texts: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """split -> kind (and ``all``) -> metric -> describe() of the texts' ratios; only
    the splits that have texts."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for split in SPLITS:
        rows = [t for t in texts.values() if t["split"] == split]
        if not rows:
            continue
        kinds = sorted({t["kind"] for t in rows})
        out[split] = {}
        for kind in [*kinds, ALL_KINDS]:
            mine = [t for t in rows if kind == ALL_KINDS or t["kind"] == kind]
            out[split][kind] = {
                key: describe([t[key] for t in mine if t[key] is not None]) for key, _ in METRICS
            }
            out[split][kind]["texts"] = len(mine)
    return out


def corpus_goals(texts: Mapping[str, Mapping[str, Any]], split: str) -> list[dict[str, Any]]:
    """The issue's corpus goals on one split's texts: value, threshold, met (None, with
    ``not_judged``, where a text ran fewer than MIN_REPS repetitions or nothing was
    measured)."""
    rows = [t for t in texts.values() if t["split"] == split]
    if not rows:
        return []
    few = [t for t in rows if t["reps"] < MIN_REPS]
    why = f"{len(few)} text(s) with fewer than {MIN_REPS} repetitions" if few else None
    goals: list[dict[str, Any]] = []

    def add(goal: str, values: list[float], value: float | None, threshold: float) -> None:
        if value is None:
            return
        g: dict[str, Any] = {"split": split, "goal": goal, "value": value,
                             "threshold": threshold, "texts": len(values)}  # fmt: skip
        if why is not None:
            g.update(met=None, not_judged=why)
        else:
            g["met"] = value >= threshold
        goals.append(g)

    plain = [t["auto_vs_plain"] for t in rows if t["auto_vs_plain"] is not None]
    add("never loses: worst text, auto / plain", plain, min(plain, default=None), NEVER_LOSES)
    # the worst median can be under 0.97x by noise alone: a text surely loses only
    # where its whole interval is under the line
    bounds = [t.get("auto_vs_plain_interval") for t in rows]
    if bounds and all(b is not None for b in bounds):
        clear = sum(1 for b in bounds if b[1] >= NEVER_LOSES) / len(bounds)
        add(f"never loses: share of texts whose {CONFIDENCE:.0%} interval reaches "
            f"{NEVER_LOSES:.2f}x", plain, clear, 1.0)  # fmt: skip
    fixed = [t["auto_vs_best_fixed"] for t in rows if t["auto_vs_best_fixed"] is not None]
    add("auto / best fixed gamma: median", fixed, median(fixed) if fixed else None,
        NEAR_BEST_MEDIAN)  # fmt: skip
    share = sum(1 for v in fixed if v >= NEAR_BEST_FLOOR) / len(fixed) if fixed else None
    add(f"auto / best fixed gamma: share of texts >= {NEAR_BEST_FLOOR:.2f}", fixed, share,
        NEAR_BEST_SHARE)  # fmt: skip
    for kind in COPY_HEAVY:
        vals = [t["auto_vs_lookup"] for t in rows
                if t["kind"] == kind and t["auto_vs_lookup"] is not None]  # fmt: skip
        add(f"{kind}: auto / llama-lookup best, median", vals,
            median(vals) if vals else None, VS_LOOKUP_COPY)  # fmt: skip
    return goals


def distribution(report: Mapping[str, Any]) -> dict[str, Any]:
    """The corpus section of a report: per-text ratios, per split and kind their
    summary, the goals of each split, and how quiet the machine was (the spread of
    plain tok/s across repetitions, per text: median and maximum)."""
    texts = text_ratios(report)
    spreads = [t["plain_spread"] for t in texts.values() if t["plain_spread"] is not None]
    return {
        "drafter": main_drafter(report),
        "texts": texts,
        "kinds": by_kind(texts),
        "goals": [g for split in SPLITS for g in corpus_goals(texts, split)],
        "plain_spread": {
            "median": median(spreads) if spreads else None,
            "max": max(spreads, default=None),
        },
    }


def _fmt(x: float | None, spec: str = ".2f", suffix: str = "x") -> str:
    return "-" if x is None else f"{x:{spec}}{suffix}"


def distribution_text(dist: Mapping[str, Any]) -> str:
    """The corpus section as Markdown: per split and kind median / p10 / worst of each
    ratio, then every text's ratios, then the goals."""
    parts = [
        f"## Corpus: distributions ({dist['drafter']} auto; p10 is the nearest-rank 10th "
        "percentile, worst the minimum)",
    ]
    spread = dist.get("plain_spread") or {}
    if spread.get("median") is not None:
        parts.append(
            f"plain tok/s spread across repetitions, per text: median "
            f"{spread['median']:.1%}, max {spread['max']:.1%}"
        )
    head = ["split", "kind", "texts"]
    for _, title in METRICS:
        head += [f"{title} median", "p10", "worst"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for split, kinds in dist["kinds"].items():
        for kind, stats in kinds.items():
            cells = [split, f"**{kind}**" if kind == ALL_KINDS else kind, str(stats["texts"])]
            for key, _ in METRICS:
                s = stats[key]
                cells += [_fmt(s["median"]), _fmt(s["p10"]), _fmt(s["worst"])]
            lines.append("| " + " | ".join(cells) + " |")
    parts += ["", *lines, ""]
    head = ["text", "kind", "split", "plain tok/s", f"auto / plain [{CONFIDENCE:.0%} interval]",
            "auto / best fixed (g)",
            "auto / lookup best (n)"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    order = sorted(dist["texts"].items(), key=lambda kv: (kv[1]["split"], kv[1]["kind"], kv[0]))
    for name, t in order:
        fixed = _fmt(t["auto_vs_best_fixed"])
        if t["best_fixed_gamma"] is not None:
            fixed += f" ({t['best_fixed_gamma']})"
        lookup = _fmt(t["auto_vs_lookup"])
        if t["lookup_best"] is not None:
            lookup += f" ({t['lookup_best']})"
        vs_plain = _fmt(t["auto_vs_plain"]) + (" !" if t["over_ceiling"] else "")
        if (interval := t.get("auto_vs_plain_interval")) is not None:
            vs_plain += f" [{interval[0]:.2f}-{interval[1]:.2f}]"
        cells = [name, t["kind"], t["split"], _fmt(t["plain_tokens_per_second"], ".1f", ""),
                 vs_plain, fixed, lookup]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    parts += lines
    if dist["goals"]:
        parts += ["", "| split | corpus goal | texts | measured | needed | met |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for g in dist["goals"]:
            if g["met"] is None:
                met = f"not judged ({g['not_judged']})"
            else:
                met = "yes" if g["met"] else "**no**"
            value = f"{g['value']:.0%}" if "share" in g["goal"] else f"{g['value']:.3f}x"
            need = f"{g['threshold']:.0%}" if "share" in g["goal"] else f"{g['threshold']:.2f}x"
            parts.append(
                f"| {g['split']} | {g['goal']} | {g['texts']} | {value} | {need} | {met} |"
            )
        parts.append("(the goals count on the validation half; the tuning half is for tuning)")
    return "\n".join(parts)
