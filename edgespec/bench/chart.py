"""The benchmark at a glance: a PNG with speed-ups per workload and accepted-length histograms."""

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


def write_chart(report: Mapping[str, Any], path: str | Path) -> Path:
    """Draw the chart into path (PNG) with matplotlib's Agg backend."""
    try:
        import matplotlib
    except ImportError:
        raise InvalidParameterError(
            "--chart needs matplotlib (pip install matplotlib, or install edgespec[dev])"
        ) from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
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
