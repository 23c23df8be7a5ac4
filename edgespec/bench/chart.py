"""The benchmark at a glance: a PNG with speed-ups per workload and accepted-length histograms;
for a corpus run, per kind the distribution of each ratio against 1.0x."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import InvalidParameterError
from . import llamacpp
from .stats import best_key

PLAIN = "plain"


def chart_series(report: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """series name -> workload -> speed-up vs plain: each drafter's auto and best fixed
    gamma, and llama.cpp's binaries at their best draft length (n/a where not run)."""
    series: dict[str, dict[str, float]] = {}
    for wname, w in report["workloads"].items():
        rows = w["configs"]
        for d, a in w["auto"].items():
            if a.get("speedup") is not None:
                series.setdefault(f"{d} auto", {})[wname] = a["speedup"]
            if a.get("best_fixed_speedup") is not None:
                series.setdefault(f"{d} best fixed", {})[wname] = a["best_fixed_speedup"]
        for kind, name in ((llamacpp.LOOKUP, "llama-lookup best"),
                           (llamacpp.SPECULATIVE, "llama-spec best")):  # fmt: skip
            best = best_key({k: r for k, r in rows.items() if r["kind"] == kind and r["reps"]})
            if best is not None:
                series.setdefault(name, {})[wname] = rows[best]["speedup"]
    return series


def _pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend; InvalidParameterError without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        raise InvalidParameterError(
            "--chart needs matplotlib (pip install matplotlib, or install edgespec[dev])"
        ) from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_chart(report: Mapping[str, Any], path: str | Path) -> Path:
    """Draw the chart into path (PNG) with matplotlib's Agg backend: the distributions
    for a corpus run (``write_distribution_chart``), else speed-ups per workload."""
    if report.get("distribution"):
        return write_distribution_chart(report, path)
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    workloads = list(report["workloads"])
    series = chart_series(report)
    n_w = max(len(workloads), 1)
    fig = plt.figure(figsize=(max(9.0, 2.2 * n_w + 3), 8.5), constrained_layout=True)
    grid = fig.add_gridspec(2, n_w, height_ratios=[1.5, 1.0])
    ax = fig.add_subplot(grid[0, :])
    width = 0.8 / max(len(series), 1)
    colors = plt.get_cmap("tab10").colors
    for i, (name, vals) in enumerate(series.items()):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(n_w)]
        ys = [vals.get(w, 0.0) for w in workloads]
        bars = ax.bar(xs, ys, width * 0.95, label=name, color=colors[i % len(colors)])
        for b, y in zip(bars, ys, strict=True):
            if y > 0:
                ax.annotate(f"{y:.2f}", (b.get_x() + b.get_width() / 2, y), ha="center",
                            va="bottom", fontsize=7, rotation=90, xytext=(0, 2),
                            textcoords="offset points")  # fmt: skip
    ax.axhline(1.0, color="black", lw=1, label="plain decoding = 1.0")
    ax.set_xticks(range(n_w))
    ax.set_xticklabels([f"{w}\nT={report['workloads'][w]['temperature']:g}" for w in workloads])
    ax.set_ylabel("speed-up vs plain decoding (median of per-rep ratios)")
    top = max((v for s in series.values() for v in s.values()), default=1.0)
    ax.set_ylim(0, max(1.5, top * 1.2))
    ax.legend(loc="upper left", fontsize=8, ncols=min(len(series) + 1, 5))
    ax.set_title(
        f"edgespec bench: {Path(report['target']).name}, {report['threads']} threads, "
        f"{report['reps']} reps (measured on this machine)",
        fontsize=10,
    )
    for j, wname in enumerate(workloads):
        hax = fig.add_subplot(grid[1, j])
        w = report["workloads"][wname]
        hists = _histograms(w)
        width = 0.8 / max(len(hists), 1)
        for i, (name, (series_name, hist)) in enumerate(hists.items()):
            total = sum(hist)
            xs = [k + (i - (len(hists) - 1) / 2) * width for k in range(len(hist))]
            names = list(series)
            k = names.index(series_name) if series_name in names else len(names) + i
            color = colors[k % len(colors)]
            hax.bar(xs, [h / total for h in hist], width, label=name, color=color)
        hax.set_title(wname, fontsize=9)
        hax.set_xlabel("draft tokens accepted per round", fontsize=8)
        hax.set_ylim(0, 1)
        if j == 0:
            hax.set_ylabel("share of drafting rounds", fontsize=8)
        if hists:
            hax.legend(fontsize=6)
        else:
            hax.text(0.5, 0.5, "no drafting rounds", ha="center", transform=hax.transAxes)
        hax.tick_params(labelsize=7)
        hax.xaxis.set_major_locator(MaxNLocator(integer=True))
    out = Path(path)
    fig.savefig(out, dpi=110, format="png")  # whatever the name ends in
    plt.close(fig)
    return out


def _histograms(workload: Mapping[str, Any]) -> dict[str, tuple[str, list[int]]]:
    """Accepted-length histograms worth showing: each drafter's auto and best fixed gamma,
    as label -> (the bar series drawn in the same colour, counts)."""
    rows = workload["configs"]
    out: dict[str, tuple[str, list[int]]] = {}
    for d, a in workload["auto"].items():
        labels = [(f"{d} auto", f"{d} auto")]
        if a.get("best_fixed_gamma") is not None:
            labels.append((f"{d} g={a['best_fixed_gamma']}", f"{d} best fixed"))
        for label, series_name in labels:
            hist = rows.get(label, {}).get("accepted_hist") or []
            if sum(hist):
                out[label] = (series_name, hist)
    return out


def distribution_series(dist: Mapping[str, Any], metric: str) -> dict[str, dict[str, list[float]]]:
    """kind -> split -> the texts' values of one ratio (texts without it left out)."""
    out: dict[str, dict[str, list[float]]] = {}
    for t in dist["texts"].values():
        if t.get(metric) is not None:
            out.setdefault(t["kind"] or "-", {}).setdefault(t["split"], []).append(t[metric])
    return dict(sorted(out.items()))


def write_distribution_chart(report: Mapping[str, Any], path: str | Path) -> Path:
    """One panel per ratio (auto / plain, / best fixed gamma, / llama-lookup's best): per
    kind a box (quartiles, whiskers to the extremes) and every text as a dot, tuning and
    validation side by side, against 1.0x and the goal's threshold."""
    from .corpus import (
        COPY_HEAVY,
        METRICS,
        NEAR_BEST_FLOOR,
        NEVER_LOSES,
        SPLITS,
        VS_LOOKUP_COPY,
    )

    plt = _pyplot()
    dist = report["distribution"]
    panels = [(k, t) for k, t in METRICS if distribution_series(dist, k)]
    goal_line = {"auto_vs_plain": NEVER_LOSES, "auto_vs_best_fixed": NEAR_BEST_FLOOR,
                 "auto_vs_lookup": VS_LOOKUP_COPY}  # fmt: skip
    goal_note = {"auto_vs_lookup": f" (median; {', '.join(COPY_HEAVY)})"}
    kinds = sorted({t["kind"] or "-" for t in dist["texts"].values()})
    fig, axes = plt.subplots(
        max(len(panels), 1), 1, figsize=(max(8.0, 1.6 * len(kinds) + 2), 3.4 * max(len(panels), 1)),
        constrained_layout=True, squeeze=False,
    )  # fmt: skip
    colors = {SPLITS[0]: "tab:blue", SPLITS[1]: "tab:orange"}
    for ax, (metric, title) in zip(axes[:, 0], panels, strict=False):
        series = distribution_series(dist, metric)
        labelled: set[str] = set()
        for i, kind in enumerate(kinds):
            for j, split in enumerate(SPLITS):
                vals = series.get(kind, {}).get(split, [])
                if not vals:
                    continue
                x = i + (j - 0.5) * 0.36
                ax.boxplot([vals], positions=[x], widths=0.28, whis=(0, 100),
                           showfliers=False, medianprops={"color": colors[split]})  # fmt: skip
                jitter = [x + ((k % 5) - 2) * 0.03 for k in range(len(vals))]
                label = None if split in labelled else split  # one legend entry each
                labelled.add(split)
                ax.scatter(jitter, vals, s=14, color=colors[split], alpha=0.8, zorder=3,
                           label=label)  # fmt: skip
        ax.axhline(1.0, color="black", lw=1)
        note = f"goal line {goal_line[metric]:.2f}x{goal_note.get(metric, '')}"
        ax.axhline(goal_line[metric], color="grey", lw=1, ls="--", label=note)
        ax.set_xticks(range(len(kinds)))
        ax.set_xticklabels(kinds)
        ax.set_xlim(-0.6, len(kinds) - 0.4)
        ax.set_ylabel(f"{title} (x)")
        ax.legend(fontsize=7, loc="upper left")
    if panels:
        axes[0, 0].set_title(
            f"edgespec bench --corpus: {Path(report['target']).name}, {report['threads']} "
            f"threads, {report['reps']} reps; {dist['drafter']} auto, one dot per text",
            fontsize=10,
        )
    out = Path(path)
    fig.savefig(out, dpi=110, format="png")
    plt.close(fig)
    return out
