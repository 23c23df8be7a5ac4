"""A cost curve slowed by something else is flagged noisy, and a benchmark measures it again."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from edgespec.backend import LlamaModel
from edgespec.bench import runner
from edgespec.bench.report import warning_lines
from edgespec.drafting.ngram import NgramDrafter
from edgespec.policy import costs
from edgespec.policy.costs import INVERSION_NOISE, CostCurve, inversion, machine_key


def test_inversion_is_the_worst_ratio_to_a_larger_size() -> None:
    assert inversion({1: 0.01, 2: 0.02, 4: 0.03}) == 1.0
    # the CPU staircase: 7 rows a little dearer than 8 is no noise
    assert inversion({1: 0.01, 7: 0.041, 8: 0.033}) == pytest.approx(0.041 / 0.033)
    assert inversion({1: 0.01, 7: 0.041, 8: 0.033}) < INVERSION_NOISE
    # the bench warm-up that timed 8 rows at 282 ms and 12 at 102 ms
    bad = {1: 0.0176, 4: 0.148, 5: 0.0917, 8: 0.2816, 12: 0.1018, 16: 0.1355}
    assert inversion(bad) == pytest.approx(0.2816 / 0.1018)


@dataclass
class SleepyModel:
    """Decodes by sleeping: 1 ms a row, except `slow_size` rows, which take 40 ms."""

    path: Path
    slow_size: int
    n_batch: int = 512
    n_threads: int = 1
    n_gpu_layers: int = 0
    tokens: list[int] = field(default_factory=list)

    def tokenize(self, text: str) -> list[int]:
        return [1] * 16

    def reset(self) -> None:
        self.tokens = []

    def truncate(self, n: int) -> None:
        del self.tokens[n:]

    def decode(self, tokens: list[int], logits: str = "last") -> None:
        if len(tokens) <= 12:  # (not the prompt of CALIBRATION_DEPTH tokens)
            time.sleep(0.040 if len(tokens) == self.slow_size else 0.001 * len(tokens))
        self.tokens += tokens


def test_a_size_slower_than_a_larger_one_in_every_repetition_is_noise(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")
    # repetitions agree (no spread), but 8 rows cost 3x what 12 rows cost
    curve = costs.measure_curve(SleepyModel(path, slow_size=8), max_k=12)  # type: ignore[arg-type]
    assert curve.noisy and curve.provisional
    assert curve.seconds[7] > 2 * curve.seconds[11]


@dataclass
class Measurements:
    plan: list[bool] = field(default_factory=list)  # noisy flag of each measurement (last repeats)
    calls: list[bool] = field(default_factory=list)  # those made


@pytest.fixture
def measured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Measurements:
    """measure_curve replaced by one whose curves are noisy as planned."""
    monkeypatch.setenv("EDGESPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(costs, "_process_curves", {})
    monkeypatch.setattr(costs, "_gap_calibrations", {})
    m = Measurements()

    def measure(model: LlamaModel, *, max_k: int) -> CostCurve:
        noisy = m.plan[min(len(m.calls), len(m.plan) - 1)]
        m.calls.append(noisy)
        return CostCurve(
            model=model.path.name,
            key=machine_key(model, max_k),
            seconds=tuple(0.01 * k for k in range(1, max_k + 1)),
            timed=tuple(range(1, max_k + 1)),
            noisy=noisy,
            provisional=noisy,
        )

    monkeypatch.setattr(costs, "measure_curve", measure)
    return m


@pytest.mark.parametrize(
    ("plan", "measures", "still_noisy"),
    [([False], 1, False), ([True, True, False], 3, False), ([True], 3, True)],
)
def test_the_bench_measures_a_noisy_curve_again_before_timing(
    synthetic_models: dict[str, Path],
    measured: Measurements,
    plan: list[bool],
    measures: int,
    still_noisy: bool,
) -> None:
    measured.plan[:] = plan
    target = LlamaModel(synthetic_models["target"], n_ctx=256, n_threads=1)
    lines: list[str] = []
    setup = runner.BenchSetup(
        target=str(synthetic_models["target"]), drafters=["ngram"], workloads=[],
        gammas=["auto"], log=lines.append,
    )  # fmt: skip
    drafters = {"ngram": runner.LoadedDrafter("ngram", NgramDrafter)}
    try:
        curves = runner._warm_up(target, drafters, setup)
    finally:
        target.close()
    assert len(measured.calls) == measures  # the policy then drafts by the last one
    assert curves["target_noisy"] == [float(still_noisy)]
    assert sum("noisy" in line for line in lines) == measures - 1
    report = {"workloads": {}, "calibration": curves}
    assert any("cost curve stayed noisy" in line for line in warning_lines(report)) == still_noisy
