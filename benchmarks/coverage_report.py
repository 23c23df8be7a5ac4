#!/usr/bin/env python3
"""The schema coverage report: totals, the per-schema table, several runs merged.

``schema_coverage.py`` writes one JSON report per run; this module sums it up. Outputs
are counted in two groups. **Enforced** schemas are those the server accepts as a
strict ``response_format``: every keyword that decides validity is in the grammar, so
every finished output must validate (issue 52's goal). **Lenient-only** schemas compile
only with unenforceable keywords ignored (``strict: false``, the mode tool parameters
use): a finished output may break exactly those keywords (``uniqueItems`` over free strings,
``dependentRequired``, ``propertyNames``...), and such outputs are counted apart with
the keyword that failed.

Merge runs (e.g. one per model, made at once) and print the table again::

    .venv/bin/python benchmarks/coverage_report.py run1.json run2.json:gemma-3-270m --out all.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _group(outs: list[dict[str, Any]]) -> dict[str, Any]:
    finished = [o for o in outs if o["finished"]]
    return {"total": len(outs), "finished": len(finished),
            "valid": sum(o["valid"] for o in finished),
            "cut": len(outs) - len(finished)}  # fmt: skip


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """Totals: compiled, accepted, refused for nothing llguidance lacks, outputs."""
    schemas = report["schemas"]
    summary: dict[str, Any] = {
        "schemas": len(schemas),
        "llguidance_compiles": sum(not s["llguidance_error"] for s in schemas),
        "llguidance_compiles_lenient": sum(not s["llguidance_lenient_error"] for s in schemas),
        "models": {},
    }
    compiled = {s["name"] for s in schemas if not s["llguidance_error"]}
    for model, rows in report["models"].items():
        m: dict[str, Any] = {}
        for kind in ("response_format", "tool_required", "tool_auto"):
            m[f"{kind}_accepted"] = sum(bool(r.get(kind)) for r in rows.values())
            m[f"{kind}_refused_though_llguidance_compiles"] = sorted(
                n for n, r in rows.items() if n in compiled and not r.get(kind)
            )
        for kind in ("outputs", "tool_outputs"):
            m[kind] = _group([o for r in rows.values() for o in r[kind]])
        every = [(n, o) for n, r in rows.items() for o in r["outputs"] + r["tool_outputs"]]
        strict = {n for n, r in rows.items() if r.get("response_format")}
        m["enforced"] = _group([o for n, o in every if n in strict])
        m["lenient_only"] = _group([o for n, o in every if n not in strict])
        m["invalid"] = [
            {"schema": n, "enforced": n in strict, "error": o.get("error", "")[:200]}
            for n, o in every
            if o["finished"] and not o["valid"]
        ]
        m["auto_leaks"] = sorted(n for n, r in rows.items() if r.get("auto_leaked"))
        summary["models"][model] = m
    return summary


def print_table(report: dict[str, Any]) -> None:
    """One line per schema (llguidance; per model: accepted rf/req/auto, valid/finished)."""
    models = list(report["models"])
    head = f"{'schema':42} {'origin':13} {'llg':>4} {'len':>4}"
    for model in models:
        head += f" | {model[:22]:22} {'rf req auto':11} {'valid/fin':>9} {'cut':>3}"
    print(head)
    print("-" * len(head))
    for s in report["schemas"]:
        line = (f"{s['name']:42} {s['origin']:13} {'ok' if not s['llguidance_error'] else 'no':>4}"
                f" {'ok' if not s['llguidance_lenient_error'] else 'no':>4}")  # fmt: skip
        for model in models:
            r = report["models"][model].get(s["name"], {})
            flags = " ".join(
                "ok" if r.get(k) else "--"
                for k in ("response_format", "tool_required", "tool_auto")
            )
            outs = r.get("outputs", []) + r.get("tool_outputs", [])
            fin = [o for o in outs if o["finished"]]
            valid = sum(o["valid"] for o in fin)
            line += f" | {'':22} {flags:11} {f'{valid}/{len(fin)}':>9} {len(outs) - len(fin):>3}"
        print(line)
    summary = report["summary"]
    print()
    print(f"{summary['schemas']} schemas; llguidance compiles {summary['llguidance_compiles']} "
          f"as given, {summary['llguidance_compiles_lenient']} leniently")  # fmt: skip
    for model, m in summary["models"].items():
        e, le = m["enforced"], m["lenient_only"]
        print(f"{model}: accepted rf {m['response_format_accepted']}, "
              f"tool required {m['tool_required_accepted']}, auto {m['tool_auto_accepted']}; "
              f"enforced schemas: valid {e['valid']}/{e['finished']} finished ({e['cut']} cut); "
              f"lenient-only: valid {le['valid']}/{le['finished']} finished ({le['cut']} cut); "
              f"auto leaks {len(m['auto_leaks'])}")  # fmt: skip
        for bad in m["invalid"]:
            print(
                f"  invalid ({'enforced' if bad['enforced'] else 'lenient-only'}) "
                f"{bad['schema']}: {bad['error'].splitlines()[0] if bad['error'] else ''}"
            )
        for kind in ("response_format", "tool_required", "tool_auto"):
            refused = m[f"{kind}_refused_though_llguidance_compiles"]
            if refused:
                print(f"  {kind} refused though llguidance compiles: {', '.join(refused)}")


def merge(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One report from several runs over the same schemas (a model's rows appended).

    Runs of one model must differ in ``--seed-base`` (the same seeds give the same
    outputs); a run given as ``path:model`` counts for that model only.
    """
    out: dict[str, Any] = {"runs": [r["args"] for r in reports],
                           "llguidance": reports[0]["llguidance"],
                           "schemas": reports[0]["schemas"], "models": {}}  # fmt: skip
    names = [s["name"] for s in out["schemas"]]
    seen: set[tuple[str, int]] = set()
    for r in reports:
        if [s["name"] for s in r["schemas"]] != names:
            raise SystemExit("coverage_report: the runs are over different schema sets")
        for model, rows in r["models"].items():
            run = (model, r["args"].get("seed_base", 0))
            if run in seen:
                raise SystemExit(f"coverage_report: two runs of {model} with seed base {run[1]}")
            seen.add(run)
            mine = out["models"].setdefault(model, {})
            for name, row in rows.items():
                if name not in mine:
                    mine[name] = json.loads(json.dumps(row))
                else:
                    mine[name]["outputs"] += row["outputs"]
                    mine[name]["tool_outputs"] += row["tool_outputs"]
    out["summary"] = summarize(out)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "reports", nargs="+", help="schema_coverage.py --out files (path:model: one model's rows)"
    )
    p.add_argument("--out", type=Path, default=None, help="write the merged report here")
    args = p.parse_args(argv)
    try:
        reports = []
        for spec in args.reports:
            path, _, model = str(spec).partition(":")
            report = json.loads(Path(path).read_text())
            if model:
                if model not in report["models"]:
                    raise ValueError(f"{path} has no model {model}")
                report["models"] = {model: report["models"][model]}
            reports.append(report)
    except (OSError, ValueError, KeyError) as e:
        print(f"coverage_report: {e}", file=sys.stderr)
        return 2
    report = merge(reports)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
