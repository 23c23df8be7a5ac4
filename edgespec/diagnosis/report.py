"""The doctor's report: what it found, as dataclasses, a dict for ``--json`` and text."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Environment:
    """The backend and build: devices, kernel mode, patch, threads."""

    backend: str  # "CPU" or the accelerators' names
    devices: list[dict[str, Any]]  # name, description, memory_mib
    gpu_offload: bool  # this llama.cpp build can offload layers
    gpu_layers: int
    threads: int
    kernel_mode: str
    swa_ring: bool  # edgespec's sliding-window ring patch is in the loaded llama.cpp
    amx: bool
    system_info: str


@dataclass(frozen=True)
class VerifyCurve:
    """The target's verify-cost curve, summarised."""

    step_ms: float  # one plain step as timed in the generations (not the calibration)
    ratio_8: float  # cost(8 rows) / cost(1 row)
    regime: str
    ratios: dict[int, float]  # cost(k) / cost(1) for the timed sizes
    origin: str  # where the curve came from (cache, measured now, noisy)
    noisy: bool
    measured: dict[int, float] = field(default_factory=dict)  # cost(k) / cost(1) in the runs


@dataclass(frozen=True)
class DrafterResult:
    """One drafter: what was measured, what Leviathan's formula predicts from it (with the
    acceptance measured at each draft position)."""

    spec: str
    label: str
    gamma: int  # the gamma it was measured at (the one the prediction picked)
    alpha: float | None  # per-token acceptance
    draft_cost: float  # one draft token's time / one plain step's
    proposal_rate: float  # share of rounds that drafted anything (a lookup's < 1)
    verify_ratio: float  # cost(gamma + 1) / cost(1) as priced: measured in the runs
    calibrated_ratio: float  # ... and as the calibrated curve says
    tokens_per_round: float  # E, predicted from the acceptance at each draft position
    tokens_per_round_constant: float  # E at a constant alpha (Leviathan's assumption)
    tokens_per_round_measured: float  # what the rounds returned (accepted + 1 each)
    round_cost: float  # a round's cost in plain steps, predicted
    predicted: float  # speed-up over plain, by the formula
    measured: float | None  # speed-up over plain, timed (median over repetitions)
    measured_reps: list[float]
    drafted: int
    accepted: int
    rejections: int  # rounds that ended in a rejection
    tokens_per_second: float
    verdict: str = ""


@dataclass(frozen=True)
class Exactness:
    """Greedy speculative output against plain, token for token."""

    passed: bool
    runs: int  # speculative generations compared with plain ones
    tokens_compared: int
    rejections: int  # rounds that ended in a rejection: what the check exercises
    mismatches: list[str] = field(default_factory=list)
    note: str = ""


@dataclass(frozen=True)
class Recommendation:
    """The ``--draft`` and ``--gamma`` to use here, and why."""

    draft: str
    gamma: int | None
    reason: str


@dataclass(frozen=True)
class DoctorReport:
    """Everything ``edgespec doctor`` found; ``ok`` is False when exactness failed."""

    target: str
    environment: Environment
    curve: VerifyCurve
    prompts: list[str]
    max_tokens: int
    reps: int
    plain_tokens_per_second: float
    drafters: list[DrafterResult]
    exactness: Exactness
    recommendation: Recommendation
    elapsed_s: float

    @property
    def ok(self) -> bool:
        """True unless greedy speculative output differed from plain."""
        return self.exactness.passed

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {**asdict(self), "ok": self.ok}

    def text(self) -> str:
        """The report for a person to read."""
        e, c, x, r = self.environment, self.curve, self.exactness, self.recommendation
        devices = ", ".join(
            f"{d['name']} ({d['description']}, {d['memory_mib']:,.0f} MiB)" for d in e.devices
        )
        lines = [
            f"target      {self.target}",
            f"backend     {e.backend}: {devices}; {e.threads} threads, {e.gpu_layers} GPU layers"
            f"{'' if e.gpu_offload else ' (this build cannot offload)'}",
            f"kernels     {e.kernel_mode}; sliding-window ring patch "
            f"{'present' if e.swa_ring else 'absent (full-size window cache)'}"
            f"{'; AMX CPU (weights not repacked)' if e.amx else ''}",
            f"verify      8 rows cost {c.ratio_8:.2f}x one: {c.regime} "
            f"(curve {c.origin}{', noisy' if c.noisy else ''}); a plain step {c.step_ms:.1f} ms, "
            f"{self.plain_tokens_per_second:.1f} tok/s",
            *(
                [f"            in the runs: {_sizes(c.measured)} (verify time over a plain step's)"]
                if c.measured
                else []
            ),
            f"prompts     {len(self.prompts)} x {self.max_tokens} tokens, {self.reps} "
            f"repetition{'s' if self.reps != 1 else ''}, greedy",
            "",
            f"{'drafter':<28} {'gamma':>5} {'alpha':>6} {'draft c':>8} {'verify':>7} "
            f"{'E tok':>6} {'cost':>6} {'predicted':>9} {'measured':>9}",
        ]
        for d in self.drafters:
            alpha = f"{d.alpha:.2f}" if d.alpha is not None else "-"
            measured = f"{d.measured:.2f}x" if d.measured is not None else "-"
            lines.append(
                f"{d.label[:28]:<28} {d.gamma:>5} {alpha:>6} {d.draft_cost:>8.2f} "
                f"{d.verify_ratio:>6.2f}x {d.tokens_per_round:>6.2f} {d.round_cost:>6.2f} "
                f"{d.predicted:>8.2f}x {measured:>9}"
            )
        lines.append("")
        lines += [f"- {d.label}: {d.verdict}" for d in self.drafters if d.verdict]
        status = "passed" if x.passed else "FAILED"
        lines.append(
            f"exactness   {status}: {x.runs} greedy speculative runs, {x.tokens_compared} tokens "
            f"compared with plain, {x.rejections} rounds with a rejection"
            f"{f'; {x.note}' if x.note else ''}"
        )
        lines += [f"  mismatch: {m}" for m in x.mismatches[:5]]
        gamma = f" --gamma {r.gamma}" if r.gamma is not None else ""
        lines.append(f"recommend   --draft {r.draft}{gamma}: {r.reason}")
        lines.append(f"({self.elapsed_s:.0f} s)")
        return "\n".join(lines)


def _sizes(ratios: dict[int, float], most: int = 6) -> str:
    """'k rows Rx one' for the most-verified sizes (the first ``most``)."""
    return ", ".join(f"{k} rows {r:.2f}x" for k, r in list(ratios.items())[:most])
