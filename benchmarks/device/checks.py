"""scripts/device_check.sh's checks: exactness, costs and kernel variants, as JSON.

    python3 benchmarks/device/checks.py --models DIR --out DIR [--gpu-layers 99] [--quick]

DIR holds tests/make_test_models.py's models (``target``, ``draft_*``) and,
optionally, benchmarks/device/big_model.py's ``big_target`` and ``big_draft``. Writes,
each as soon as its part is done (so a run cut short still leaves what it measured):

* ``exactness.json``: greedy speculative == plain (tiny pair and big pair), the
  batch-vs-single logit differences, and the chi-square sampling test;
* ``costs.json``: the verify cost curve k = 1..48 of each target and a timed
  plain-vs-speculative run of each pair;
* ``variants.json``: benchmarks/device/variants.py's settings, which give
  bit-identical logits and at what cost;
* ``summary.json``: the goals (met or not), each part's seconds and any errors.

``--quick`` shrinks every part (fewer runs, sizes and variants) for a CPU test.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent.parent)]  # measure, variants; edgespec

import measure  # noqa: E402
import variants  # noqa: E402

from edgespec import LlamaModel  # noqa: E402

#: The goals of issue 21: a 9-row verify costs at most this many one-token decodes.
VERIFY_9_GOAL = 1.5
TINY_DRAFTS = ("draft_same", "draft_noisy", "draft_unrelated")


class Checks:
    """Runs the parts in order, writing each JSON file as its part finishes."""

    def __init__(self, models: Path, out: Path, gpu_layers: int, quick: bool) -> None:
        self.models, self.out, self.gpu_layers, self.quick = models, out, gpu_layers, quick
        self.files: dict[str, dict] = {"exactness": {}, "costs": {}, "variants": {}}
        self.summary: dict = {"gpu_layers": gpu_layers, "quick": quick, "seconds": {}, "errors": {}}
        self.has_big = (models / "big_target.gguf").is_file()
        out.mkdir(parents=True, exist_ok=True)

    def load(self, name: str, n_ctx: int = 1024) -> LlamaModel:
        """One model of the models folder, offloaded as asked, one CPU thread."""
        return LlamaModel(
            self.models / f"{name}.gguf", n_ctx=n_ctx, n_threads=1, n_gpu_layers=self.gpu_layers
        )

    def write(self, name: str) -> None:
        """Write ``name``.json and the summary (with the goals so far) now."""
        self.summary["goals"] = goals(self.files)
        if name != "summary":
            (self.out / f"{name}.json").write_text(json.dumps(self.files[name], indent=1))
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=1))

    def part(self, file: str, key: str, fn: Callable[[], dict]) -> None:
        """Run one part; its result (or error) goes into ``file``.json under ``key``."""
        t0 = time.perf_counter()
        print(f"checks: {file}.{key} ...", flush=True)
        try:
            self.files[file][key] = fn()
        except Exception:  # noqa: BLE001  (recorded: the other parts still run)
            self.summary["errors"][f"{file}.{key}"] = traceback.format_exc()[-3000:]
            print(traceback.format_exc(), file=sys.stderr, flush=True)
        self.summary["seconds"][f"{file}.{key}"] = round(time.perf_counter() - t0, 3)
        self.write(file)

    # --- the parts ----------------------------------------------------------

    def tiny_greedy(self) -> dict:
        """Greedy speculative == plain: the tiny target with three drafts."""
        gammas, tokens = ((1, 4), 24) if self.quick else ((1, 2, 4, 8), 48)
        with self.load("target", 512) as t:
            drafts = {name: self.load(name, 512) for name in TINY_DRAFTS}
            try:
                return measure.greedy_exactness(t, drafts, gammas, max_tokens=tokens)
            finally:
                for d in drafts.values():
                    d.close()

    def big_greedy(self) -> dict:
        """Greedy speculative == plain: the memory-bound target with its 1-layer draft."""
        gammas, prompts = ((4,), measure.PROMPTS[:2]) if self.quick else ((1, 4, 8, 16), None)
        with self.load("big_target") as t, self.load("big_draft") as d:
            return measure.greedy_exactness(
                t, {"big_draft": d}, gammas, prompts or measure.PROMPTS, max_tokens=32
            )

    def logits(self, name: str) -> dict:
        """Batch-vs-single logit differences of one model."""
        sizes = (2, 9) if self.quick else (2, 4, 8, 9, 16, 48)
        with self.load(name) as m:
            return measure.logit_diffs(m, sizes=sizes)

    def chi(self) -> dict:
        """The chi-square test of sampled speculative output (tiny target, noisy draft)."""
        with self.load("target", 256) as t, self.load("draft_noisy", 256) as d:
            runs = 200 if self.quick else 2000
            return measure.chi_square(self.models / "target.gguf", t, d, self.gpu_layers, runs=runs)

    def curve(self, name: str) -> dict:
        """The verify cost curve of one model."""
        max_k, reps = (12, 2) if self.quick else (48, 5)
        with self.load(name) as m:
            return measure.verify_curve(m, max_k=max_k, reps=reps)

    def speed(self, target: str, draft: str) -> dict:
        """Plain vs speculative wall time of one pair."""
        tokens, gammas = (16, (4,)) if self.quick else (64, (4, 8))
        with self.load(target) as t, self.load(draft) as d:
            return measure.plain_vs_speculative(t, d, gammas, max_tokens=tokens)

    def kernel_variants(self) -> dict:
        """benchmarks/device/variants.py over the tiny and (if written) the big target."""
        paths = {"target": self.models / "target.gguf"}
        if self.has_big:
            paths["big_target"] = self.models / "big_target.gguf"
        names = ["default", "flash_attn_off"] if self.quick else None

        def progress(results: dict) -> None:
            self.files["variants"]["kernel_variants"] = results
            self.write("variants")

        return variants.run_variants(paths, self.gpu_layers, names, progress=progress)

    def run(self) -> dict:
        """All parts, then the goals; returns the summary."""
        self.part("exactness", "greedy_tiny", self.tiny_greedy)
        if self.has_big:
            self.part("exactness", "greedy_big", self.big_greedy)
        self.part("exactness", "logits_tiny", lambda: self.logits("target"))
        if self.has_big:
            self.part("exactness", "logits_big", lambda: self.logits("big_target"))
        self.part("exactness", "chi_square", self.chi)
        self.part("costs", "curve_tiny", lambda: self.curve("target"))
        if self.has_big:
            self.part("costs", "curve_big", lambda: self.curve("big_target"))
        self.part("costs", "speed_tiny", lambda: self.speed("target", "draft_noisy"))
        if self.has_big:
            self.part("costs", "speed_big", lambda: self.speed("big_target", "big_draft"))
        self.part("variants", "kernel_variants", self.kernel_variants)
        self.write("summary")
        return self.summary


def goals(files: dict[str, dict]) -> dict:
    """issue 21's goals from the parts' results (None where a part did not run)."""
    ex, costs = files["exactness"], files["costs"]

    def greedy(key: str) -> bool | None:
        return ex[key]["equal"] if key in ex else None

    curve = costs.get("curve_big") or costs.get("curve_tiny")
    ratio_9 = curve["ratio"][8] if curve and len(curve["ratio"]) >= 9 else None
    return {
        "greedy_equal_tiny": greedy("greedy_tiny"),
        "greedy_equal_big": greedy("greedy_big"),
        "chi_square_passed": ex["chi_square"]["passed"] if "chi_square" in ex else None,
        "verify_9_model": curve and ("big_target" if "curve_big" in costs else "target"),
        "verify_9_ratio": ratio_9,
        "verify_9_goal": VERIFY_9_GOAL,
        "verify_9_met": None if ratio_9 is None else ratio_9 <= VERIFY_9_GOAL,
    }


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; exit status 0 when every part ran (goals met or not)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--gpu-layers", type=int, default=99)
    p.add_argument("--quick", action="store_true", help="small runs, for a CPU test")
    a = p.parse_args(argv)
    summary = Checks(a.models, a.out, a.gpu_layers, a.quick).run()
    print(json.dumps(summary["goals"], indent=1))
    return 1 if summary["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
