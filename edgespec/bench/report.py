"""From per-repetition records to the benchmark report (JSON) and its tables (Markdown)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import llamacpp
from .corpus import distribution, distribution_text
from .load import load_line
from .stats import (
    PLAIN_SPREAD,
    RunRecord,
    best_key,
    check_goals,
    median_ratio,
    over_ceiling,
    spread,
    summarise,
    verify_ceiling,
)
from .vs_server import comparison, comparison_text
from .workloads import Workload

PLAIN = "plain"


def build_report(
    records: Mapping[str, Mapping[str, Sequence[RunRecord | None]]],
    info: Mapping[str, Any],
    workloads: Sequence[Workload],
    meta: Mapping[str, Any],
) -> dict[str, Any]:
    """The whole report: run facts, per-workload summaries, adaptive-vs-fixed, goals."""
    configs = {c["label"]: c for c in info["configs"]}
    drafters = info["drafters"]
    by_name = {w.name: w for w in workloads}
    out: dict[str, Any] = {}
    for wname, per in records.items():
        plain = per[PLAIN]
        rows: dict[str, Any] = {}
        for label, recs in per.items():
            cfg = configs[label]
            rows[label] = {
                "kind": cfg["kind"],
                "drafter": cfg["drafter"],
                "gamma": cfg["gamma"],
                **summarise(recs, plain, _cost_ratio(cfg, drafters)),
            }
        w = by_name[wname]
        out[wname] = {
            "description": w.description,
            "kind": w.kind,
            "temperature": w.temperature,
            "max_tokens": meta.get("max_tokens") or w.max_tokens,
            "prompt_tokens": info.get("prompt_tokens", {}).get(wname),
            "depth_ceiling": info.get("depth_ceilings", {}).get(wname),
            "configs": rows,
            "auto": {},  # filled in by finish
        }
    return finish({**meta, **info, "workloads": out, "goals": []})


def finish(report: dict[str, Any]) -> dict[str, Any]:
    """Figures derived from a report's own data (idempotent; also brings an older saved
    report up to date): the verify-cost ceiling; no projection for llama.cpp rows, and no
    formula projection where it was computed from accepted/drafted instead of alpha; the
    flags on figures not to trust (see ``_flag``); the comparisons with the best fixed
    gamma and llama.cpp's binaries; the goals, judged only from trustworthy figures; and
    for a ``--corpus`` run the distributions over the corpus (``corpus.distribution``)."""
    curve = report.get("calibration", {}).get("target")
    if curve:
        k, ceiling = verify_ceiling(curve)
        report["verify_ceiling"] = {"batch": k, "speedup": ceiling}
    for w in report.get("workloads", {}).values():
        _flag(w, report.get("verify_ceiling"))
        for row in w["configs"].values():
            proj = row.get("projection")
            if row.get("kind") != "edgespec":
                row.pop("projection", None)
            elif proj is not None and "alpha" not in proj:
                proj["formula"] = None  # the per-round counts alpha needs were not saved
        _compare(w, report["drafters"])
    report["goals"] = check_goals(report.get("workloads", {}))
    report["vs_llama_server"] = comparison(report)  # None: llama-server did not run
    if report.get("corpus") is not None:  # a --corpus run: the distributions over it
        report["distribution"] = distribution(report)
    return report


def ceiling_of(w: Mapping[str, Any], verify: Mapping[str, Any] | None) -> float | None:
    """The highest speed-up a workload's rows can honestly show: the larger of the
    calibrated verify-cost ceiling and the one timed at the workload's depth (each is a
    bound; the larger one leaves no real speed-up flagged). None if neither was timed."""
    found = [c["speedup"] for c in (verify, w.get("depth_ceiling")) if c]
    return max(found) if found else None


def _flag(w: dict[str, Any], verify: Mapping[str, Any] | None) -> None:
    """Mark what a busy machine or too few repetitions make untrustworthy: each row's
    ``over_ceiling`` (a speed-up above the ceiling no drafter can pass), the workload's
    ``plain_spread`` ((max - min) / median of plain tok/s across repetitions) and
    ``flags``, one sentence each."""
    rows = w["configs"]
    ceiling = ceiling_of(w, verify)
    flags: list[str] = []
    for label, row in rows.items():
        # edgespec's rows only: llama.cpp's binaries run other kernels (faster ones, which
        # round differently), so their speed-up over edgespec's plain decoding is not
        # bounded by edgespec's cost curve
        mine = row.get("kind") == "edgespec"
        row["over_ceiling"] = mine and over_ceiling(row.get("speedup"), ceiling)
        if row["over_ceiling"]:
            flags.append(
                f"{label}: {row['speedup']:.2f}x is above the measured ceiling of "
                f"{ceiling:.2f}x, so its timings were disturbed (a busy machine?), not sped up"
            )
    plain = rows.get(PLAIN, {})
    w["plain_spread"] = spread(plain.get("tokens_per_second_all", []))
    if plain.get("reps") == 1:
        flags.append("one repetition: no variation to judge the timings by, and no goal is judged")
    elif w["plain_spread"] is not None and w["plain_spread"] > PLAIN_SPREAD:
        flags.append(
            f"plain tok/s varied {w['plain_spread']:.0%} across repetitions (over "
            f"{PLAIN_SPREAD:.0%}): a busy machine; its speed-ups are unreliable"
        )
    w["flags"] = flags


def _compare(w: dict[str, Any], drafters: Mapping[str, Any]) -> None:
    """Each drafter's auto against its best fixed gamma, ngram auto against llama-lookup
    and each model's auto against llama-speculative-simple, each at its best speed-up;
    ratios are medians of per-repetition ratios."""
    rows = w["configs"]

    def vs(a: str, b: str) -> float | None:
        return median_ratio(rows[a]["tokens_per_second_all"], rows[b]["tokens_per_second_all"])

    w["auto"] = {}
    for spec in drafters:
        auto = f"{spec} auto"
        fixed = {k: v for k, v in rows.items() if v["drafter"] == spec and k != auto
                 and v["kind"] == "edgespec"}  # fmt: skip
        a: dict[str, Any] = {"speedup": rows[auto]["speedup"] if auto in rows else None}
        if auto in rows:  # what the goals need to know the figures can be trusted
            a["reps"] = min(rows[auto]["reps"], rows[PLAIN]["reps"]) if PLAIN in rows else 0
            a["over_ceiling"] = rows[auto].get("over_ceiling", False)
        best = best_key(fixed)
        if auto in rows and best is not None:
            a["best_fixed_gamma"] = fixed[best]["gamma"]
            a["best_fixed_speedup"] = fixed[best]["speedup"]
            a["vs_best_fixed"] = vs(auto, best)
        w["auto"][spec] = a
    for key in ("llama_lookup_best", "vs_llama_lookup", "vs_llama_speculative"):
        w.pop(key, None)
    lookups = {k: v for k, v in rows.items() if v["kind"] == llamacpp.LOOKUP and v["reps"]}
    best_lookup = best_key(lookups)
    if best_lookup is not None and "ngram auto" in rows:
        w["llama_lookup_best"] = lookups[best_lookup]["gamma"]
        w["vs_llama_lookup"] = vs("ngram auto", best_lookup)
    for spec, d in drafters.items():
        specs = {k: v for k, v in rows.items()
                 if v["kind"] == llamacpp.SPECULATIVE and v["drafter"] == d["model"]
                 and v["reps"]}  # fmt: skip
        best_spec = best_key(specs)
        if best_spec is not None and f"{spec} auto" in rows:
            w.setdefault("vs_llama_speculative", {})[spec] = {
                "draft_length": specs[best_spec]["gamma"],
                "ratio": vs(f"{spec} auto", best_spec),
            }


def _cost_ratio(cfg: Mapping[str, Any], drafters: Mapping[str, Any]) -> float | None:
    """c for the projection: 0 for n-gram lookups, draft/target weight bytes for models."""
    if cfg["label"] == PLAIN or cfg["kind"] != "edgespec":
        return None  # llama.cpp prints no per-round figures to project from
    return drafters[cfg["drafter"]]["cost_ratio"]


def _fmt(x: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if x is None else f"{x:{spec}}{suffix}"


def summary_table(report: Mapping[str, Any]) -> str:
    """One row per workload: plain tok/s, adaptive speed-ups, best fixed, llama.cpp, goals."""
    drafters = list(report["drafters"])
    head = ["workload", "T", "plain tok/s"]
    for d in drafters:
        head += [f"{d} auto", f"{d} best fixed (g)"]
    head += ["llama-lookup best (n)", "ngram auto / lookup", "ceiling at depth"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for wname, w in report["workloads"].items():
        rows = w["configs"]
        cells = [wname, f"{w['temperature']:g}", _fmt(rows[PLAIN]["tokens_per_second"], ".1f")]
        for d in drafters:
            a = w["auto"].get(d, {})
            cells.append(
                _fmt(a.get("speedup"), ".2f", "x") + (" !" if a.get("over_ceiling") else "")
            )
            bf = a.get("best_fixed_speedup")
            cells.append("-" if bf is None else f"{bf:.2f}x ({a['best_fixed_gamma']})")
        lk = w.get("llama_lookup_best")
        if lk is not None:
            row = rows[f"llama-lookup n={lk}"]
            cells.append(f"{row['tokens_per_second']:.1f} tok/s ({lk})")
            cells.append(_fmt(w.get("vs_llama_lookup"), ".2f", "x"))
        else:
            cells += ["-", "-"]
        ceiling = w.get("depth_ceiling")
        cells.append(f"{ceiling['speedup']:.2f}x ({ceiling['depth']})" if ceiling else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def detail_table(report: Mapping[str, Any], wname: str) -> str:
    """Every configuration on one workload, medians over repetitions."""
    head = ["config", "tok/s", "vs plain", "accept", "tok/call", "gamma", "draft s", "verify s",
            "other s", "peak RSS MiB", "projection*"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, r in report["workloads"][wname]["configs"].items():
        if not r["reps"]:
            lines.append("| " + " | ".join([label, "failed"] + ["-"] * (len(head) - 2)) + " |")
            continue
        proj = r.get("projection")
        is_edge = r["kind"] == "edgespec"
        cells = [
            label,
            _fmt(r["tokens_per_second"], ".1f"),
            _fmt(r["speedup"], ".2f", "x") + (" !" if r.get("over_ceiling") else ""),
            _fmt(r["acceptance_rate"] if label != PLAIN else None, ".2f"),
            _fmt(r["mean_accepted_per_call"] if is_edge else None, ".2f"),
            _fmt(r["gamma_mean"] if is_edge else None, ".1f"),
            _fmt(r["draft_s"] if is_edge else None, ".2f"),
            _fmt(r["verify_s"] if is_edge else None, ".2f"),
            _fmt(r["other_s"] if is_edge else None, ".2f"),
            _fmt(r["peak_rss_mib"], ".0f"),
            _fmt(proj["formula"], ".2f", "x") if proj else "-",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def goals_table(report: Mapping[str, Any]) -> str:
    """The issue's goals: measured value, threshold, met or not."""
    lines = ["| goal | measured | needed | met |", "|---|---|---|---|"]
    for g in report["goals"]:
        if g["met"] is None:
            met = f"not judged ({g.get('not_judged', 'untrustworthy figures')})"
        else:
            met = "yes" if g["met"] else "**no**"
        value = _goal_value(g["value"], g["threshold"], bool(g["met"]))
        lines.append(f"| {g['goal']} | {value}x | {g['threshold']:.2f}x | {met} |")
    return "\n".join(lines)


def _goal_value(value: float, threshold: float, met: bool) -> str:
    """value to 2 decimals, or as many more as it takes for a miss not to print as the
    threshold (0.9696 against 0.97 is 0.9696, not 0.97)."""
    for places in range(2, 7):
        text = f"{value:.{places}f}"
        if met or text != f"{threshold:.{places}f}":
            return text
    return f"<{threshold:.2f}"


PROJECTION_NOTE = (
    "*projection, not a measurement: Leviathan et al.'s expected speed-up "
    "(1 - a^(g+1)) / ((1 - a)(g c + 1)) with the per-token acceptance a (estimated as "
    "accepted / (accepted + rounds ending in a rejection)) and mean draft length g, for "
    "hardware where a target call on g + 1 tokens costs one target step (memory-bandwidth "
    "bound); c = draft step / target step, 0 for n-gram lookup, "
    "draft/target weight bytes for a model."
)


def warning_lines(report: Mapping[str, Any]) -> list[str]:
    """One line per flag (see ``_flag``), naming its workloads ("every workload" when
    all of them share it, as one repetition does)."""
    where: dict[str, list[str]] = {}
    for wname, w in report["workloads"].items():
        for flag in w.get("flags", []):
            where.setdefault(flag, []).append(wname)
    n = len(report["workloads"])
    lines = [
        f"- {'every workload' if len(names) == n > 1 else ', '.join(names)}: {flag}"
        for flag, names in where.items()
    ]
    if report.get("calibration", {}).get("target_noisy", [0.0])[0]:
        lines.append(
            "- the target's cost curve stayed noisy after measuring it again (a busy "
            "machine?): gamma auto drafted by a curve that may overprice verifies"
        )
    return lines


def text_report(report: Mapping[str, Any]) -> str:
    """Everything as Markdown: summary, per-workload details, goals."""
    parts = [
        f"target {report['target']}, {report['threads']} threads, {report['reps']} reps "
        f"(medians; speed-ups are medians of per-rep ratios)",
    ]
    if report.get("load"):
        parts.append(load_line(report["load"]))
    if report.get("verify_ceiling"):
        v = report["verify_ceiling"]
        parts.append(
            f"verify-cost ceiling (calibrated curve): at most {v['speedup']:.2f}x over plain "
            f"even with every draft accepted (best at {v['batch']}-token verifies)"
        )
    parts += [
        "ceiling at depth: the same bound timed at the workload's context depth (its prompt"
        " plus half its new tokens), where attention makes every verified row dearer",
        "",
        summary_table(report),
    ]
    warnings = warning_lines(report)
    if warnings:
        parts += ["", "**Warnings** (! marks a speed-up above the ceiling):", *warnings]
    for wname in report["workloads"]:
        parts += ["", f"### {wname}", "", detail_table(report, wname)]
    parts += ["", PROJECTION_NOTE, "", goals_table(report)]
    if report.get("distribution"):
        parts += ["", distribution_text(report["distribution"])]
    if report.get("vs_llama_server"):
        parts += ["", comparison_text(report["vs_llama_server"], bool(report.get("corpus")))]
    return "\n".join(parts)
