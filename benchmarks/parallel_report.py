"""The report of benchmarks/bench_parallel.py: each goal's figure, and the table it prints."""

from __future__ import annotations

from typing import Any


def goals(r: dict[str, Any]) -> dict[str, Any]:
    """Each goal's figure and whether it was met."""
    mp, ms, ea = r["mixed_parallel"], r["mixed_serial"], r["editors_alone"]
    p50 = mp["editor_p50_s"] / ea["editor_p50_s"]
    p95 = mp["editor_p95_s"] / ea["editor_p95_s"]
    agg = mp["tokens_per_s"] / ms["tokens_per_s"]
    reply = r["lone_chat_s"]
    s, lone_r = r["sixteen"], r["lone"]
    return {
        "editor_p50_mixed_over_alone": {"value": p50, "goal": "<= 1.5", "met": p50 <= 1.5},
        "editor_p95_mixed_over_alone": {"value": p95, "goal": "<= 1.5", "met": p95 <= 1.5},
        "aggregate_tps_parallel_over_serial": {"value": agg, "goal": ">= 1.5", "met": agg >= 1.5},
        "max_wait_over_one_reply": {
            "value": mp["max_wait_s"] / reply,
            "goal": "<= 1 (parallel server)",
            "met": mp["max_wait_s"] <= reply,
            "serial": ms["max_wait_s"] / reply,
            "after_first": mp.get("max_wait_after_first_s", float("nan")) / reply,
        },
        "sixteen_clients_complete_and_equal": {
            "value": f"{s['same_as_serial']}/{s['clients']}",
            "met": s["all_completed"] and s["all_same"] and s["loop_errors"] == 0,
        },
        "rss_growth_mib": {
            "value": s["rss_growth_mib"],
            "goal": "flat (< 10 MiB)",
            "met": s["rss_growth_mib"] < 10,
        },  # fmt: skip
        "lone_decode_tps_parallel_over_serial": {
            "value": lone_r["decode_tps_ratio"],
            "goal": ">= 0.97",
            "met": lone_r["decode_tps_ratio"] >= 0.97,
        },
    }


def print_table(r: dict[str, Any]) -> None:
    mp, ms, ea = r["mixed_parallel"], r["mixed_serial"], r["editors_alone"]
    print(f"\n{r['target']}, --draft auto, --threads {r['threads']}, greedy;"
          f" {r['total_s']:.0f} s in all")  # fmt: skip
    print(f"  before: {r['uptime_before']}\n  after:  {r['uptime_after']}")
    print(f"\n  {'mixed load':<26} {'parallel':>10} {'serial':>10} {'editors alone':>14}")
    rows = [
        ("requests (editor/chat)", "{editor_requests}/{chat_requests}"),
        ("errors", "{n_errors}"),
        ("editor p50 s", "{editor_p50_s:.2f}"),
        ("editor p95 s", "{editor_p95_s:.2f}"),
        ("chat p50 s", "{chat_p50_s:.2f}"),
        ("tokens/s (all clients)", "{tokens_per_s:.1f}"),
        ("longest wait s", "{max_wait_s:.2f}"),
        ("... after first requests", "{max_wait_after_first_s:.2f}"),
        ("load before", "{load_before[0]}"),
    ]
    for label, f in rows:
        # (a report saved before the key existed reads nan there)
        cells = [f.format(**{"max_wait_after_first_s": float("nan"), **x}) for x in (mp, ms, ea)]
        print(f"  {label:<26} {cells[0]:>10} {cells[1]:>10} {cells[2]:>14}")
    print(f"  one 128-token chat reply alone (parallel server): {r['lone_chat_s']:.2f} s")
    s = r["sixteen"]
    print(f"\n  16 streaming clients: {s['same_as_serial']}/{s['clients']} equal to serial,"
          f" {s['concurrent_s']:.1f} s; {s['requests']} requests in {s['loop_s']:.0f} s,"
          f" {s['loop_errors']} errors; VmRSS MiB {s['rss_mib']}")  # fmt: skip
    lo = r["lone"]
    print(f"  lone client, {lo['tokens']} tokens: decode {lo['parallel_decode_tps']:.1f} vs"
          f" {lo['serial_decode_tps']:.1f} tok/s (median ratio {lo['decode_tps_ratio']:.3f},"
          f" e2e {lo['e2e_tps_ratio']:.3f}), same text: {lo['same_text']}")  # fmt: skip
    print("\n  goals:")
    for name, g in r["goals"].items():
        v = g["value"]
        v = f"{v:.3f}" if isinstance(v, float) else v
        print(
            f"    {name:<40} {v!s:>8}  {g.get('goal', ''):<24} {'met' if g['met'] else 'NOT met'}"
        )
