"""From per-repetition records to the benchmark report (JSON) and its tables (Markdown)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import llamacpp
from .stats import RunRecord, best_key, check_goals, median_ratio, summarise, verify_ceiling
from .workloads import Workload

PLAIN = "plain"


def _tps(recs: Sequence[RunRecord | None]) -> list[float | None]:
    return [r.tokens_per_second if r is not None else None for r in recs]


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
        entry: dict[str, Any] = {
            "description": w.description,
            "temperature": w.temperature,
            "max_tokens": meta.get("max_tokens") or w.max_tokens,
            "prompt_tokens": info.get("prompt_tokens", {}).get(wname),
            "depth_ceiling": info.get("depth_ceilings", {}).get(wname),
            "configs": rows,
            "auto": {},
        }
        for spec in drafters:
            auto = f"{spec} auto"
            fixed = {k: v for k, v in rows.items() if v["drafter"] == spec and k != auto
                     and v["kind"] == "edgespec"}  # fmt: skip
            a: dict[str, Any] = {"speedup": rows[auto]["speedup"] if auto in rows else None}
            best = best_key(fixed)
            if auto in rows and best is not None:
                a["best_fixed_gamma"] = fixed[best]["gamma"]
                a["best_fixed_speedup"] = fixed[best]["speedup"]
                a["vs_best_fixed"] = median_ratio(_tps(per[auto]), _tps(per[best]))
            entry["auto"][spec] = a
        lookups = {k: v for k, v in rows.items() if v["kind"] == llamacpp.LOOKUP and v["reps"]}
        best_lookup = best_key(lookups)
        if best_lookup is not None and "ngram auto" in per:
            entry["llama_lookup_best"] = lookups[best_lookup]["gamma"]
            entry["vs_llama_lookup"] = median_ratio(_tps(per["ngram auto"]), _tps(per[best_lookup]))
        for spec, d in drafters.items():
            specs = {k: v for k, v in rows.items()
                     if v["kind"] == llamacpp.SPECULATIVE and v["drafter"] == d["model"]
                     and v["reps"]}  # fmt: skip
            best_spec = best_key(specs)
            if best_spec is not None and f"{spec} auto" in per:
                entry.setdefault("vs_llama_speculative", {})[spec] = {
                    "draft_length": specs[best_spec]["gamma"],
                    "ratio": median_ratio(_tps(per[f"{spec} auto"]), _tps(per[best_spec])),
                }
        out[wname] = entry
    return finish({**meta, **info, "workloads": out, "goals": check_goals(out)})


def finish(report: dict[str, Any]) -> dict[str, Any]:
    """Figures derived from a report's own data (idempotent; also brings an older saved
    report up to date): the verify-cost ceiling, no projection for llama.cpp rows."""
    curve = report.get("calibration", {}).get("target")
    if curve:
        k, ceiling = verify_ceiling(curve)
        report["verify_ceiling"] = {"batch": k, "speedup": ceiling}
    for w in report.get("workloads", {}).values():
        for row in w["configs"].values():
            if row.get("kind") != "edgespec":
                row.pop("projection", None)
    return report


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
            cells.append(_fmt(a.get("speedup"), ".2f", "x"))
            bf = a.get("best_fixed_speedup")
            cells.append(f"{_fmt(bf, '.2f', 'x')} ({a['best_fixed_gamma']})" if bf else "-")
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
            _fmt(r["speedup"], ".2f", "x"),
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
        met = "yes" if g["met"] else "**no**"
        lines.append(f"| {g['goal']} | {g['value']:.2f}x | {g['threshold']:.2f}x | {met} |")
    return "\n".join(lines)


PROJECTION_NOTE = (
    "*projection, not a measurement: Leviathan et al.'s expected speed-up "
    "(1 - a^(g+1)) / ((1 - a)(g c + 1)) with the measured acceptance a and mean draft "
    "length g, for hardware where a target call on g + 1 tokens costs one target step "
    "(memory-bandwidth bound); c = draft step / target step, 0 for n-gram lookup, "
    "draft/target weight bytes for a model."
)


def text_report(report: Mapping[str, Any]) -> str:
    """Everything as Markdown: summary, per-workload details, goals."""
    parts = [
        f"target {report['target']}, {report['threads']} threads, {report['reps']} reps "
        f"(medians; speed-ups are medians of per-rep ratios)",
    ]
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
    for wname in report["workloads"]:
        parts += ["", f"### {wname}", "", detail_table(report, wname)]
    parts += ["", PROJECTION_NOTE, "", goals_table(report)]
    return "\n".join(parts)
