"""Run the benchmark: every configuration on every workload, alternating, with repetitions.

One process holds the target and every draft model. Each repetition runs all
configurations of a workload once, in forward order on even repetitions and
reversed on odd ones, so slow drift in machine load hits every configuration
alike. Before each run the KV caches are emptied (the prompt is processed cold,
and its time is excluded from tokens/s), the n-gram index and the adaptive
policy start fresh; what stays cached is the model weights (memory-mapped) and
the calibrated cost curves (measured once, up front, if missing).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..backend import DEFAULT_CTX, LlamaModel, cpu_has_amx
from ..chat_template import CHATML, ChatFormat
from ..drafting import Drafter, build_drafter
from ..errors import InvalidParameterError
from ..events import DoneEvent, RoundEvent
from ..loading import LoadOptions, load_pair, resolve_model
from ..policy.costs import load_or_measure
from ..sampling import SamplingParams
from ..speculation.loop import generate, stream_generate
from ..speculation.planning import make_policy
from . import llamacpp, llamaserver
from .memory import peak_rss_mib, reset_peak_rss
from .stats import RunRecord, ceiling_at
from .workloads import Workload

PLAIN = "plain"
CEILING_SIZES = (1, 8, 16, 24, 32, 40, 48)  # batch sizes timed for the ceiling at depth
CEILING_REPS = 3
# a noisy cost curve (policy.costs.measure_curve) is measured again up to this many
# times before the timed runs: gamma auto's figures depend on the curve it drafts by
CALIBRATION_RETRIES = 2
Records = dict[str, dict[str, list[RunRecord | None]]]  # workload -> config label -> per rep


@dataclass(frozen=True)
class Config:
    """One way of decoding: plain, an edgespec drafter at a gamma, or a llama.cpp binary."""

    label: str
    kind: str = "edgespec"  # or llamacpp.LOOKUP / llamacpp.SPECULATIVE
    drafter: str | None = None  # drafter spec (edgespec) or draft model path (speculative)
    gamma: int | str = 0


@dataclass
class BenchSetup:
    """What to run."""

    target: str
    drafters: list[str]
    workloads: list[Workload]
    gammas: list[int | str]
    reps: int = 3
    max_tokens: int | None = None  # None: each workload's own
    threads: int | None = None
    n_ctx: int = DEFAULT_CTX
    llama_cpp_bin: Path | None = None
    llama_draft_lengths: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    llama_swa_full: bool = False  # True: a full-size SWA cache (--swa-full)
    # llama-server's --spec-type values run (none: its plain decoding)
    llama_server_types: list[str] = field(default_factory=lambda: [*llamaserver.DEFAULT_TYPES])
    rpc: list[str] | None = None  # the target's layers on these RPC workers
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)


class LoadedDrafter:
    """A drafter spec and what it needs: a fresh drafter per run, its model, its cost ratio.

    Every drafter is built (``build_drafter``) around the benchmark's one target.
    """

    def __init__(self, spec: str, build: Callable[[], Drafter | None]) -> None:
        self.spec = spec
        self._build = build
        self._drafter = self._built()
        self.model = self._drafter.model

    @classmethod
    def load(cls, spec: str, target: LlamaModel, setup: BenchSetup) -> LoadedDrafter:
        """Load the drafter named by spec for target."""

        def build() -> Drafter | None:
            return build_drafter(
                target, spec, resolve=resolve_model, n_ctx=setup.n_ctx, n_threads=target.n_threads
            )

        return cls(spec, build)

    def _built(self) -> Drafter:
        drafter = self._build()
        if drafter is None:
            raise InvalidParameterError(f"{self.spec!r} is not a drafter")
        return drafter

    def fresh(self) -> Drafter:
        """The drafter, with no state from an earlier run."""
        if self.model is None:
            return self._built()  # a lookup runs no model: a new one costs nothing
        self.model.reset()
        return self._drafter

    def cost_ratio(self, target: LlamaModel) -> float:
        """Draft step over target step on memory-bound hardware: bytes of weights read."""
        if self.model is None:
            return 0.0  # a lookup reads no weights
        return self.model.path.stat().st_size / target.path.stat().st_size


def short_name(spec: str) -> str:
    """A drafter spec as a label: .gguf paths become file stems (``ngram+MODEL`` too)."""
    parts = spec.split("+")
    return "+".join(
        Path(p).name.removesuffix(".gguf") if p.endswith(".gguf") or "/" in p else p for p in parts
    )


def configs_for(setup: BenchSetup, drafters: dict[str, LoadedDrafter]) -> list[Config]:
    """Plain, each drafter at each gamma, then llama.cpp's binaries at each draft length and
    llama-server with each --spec-type."""
    configs = [Config(PLAIN)]
    for name in drafters:
        for g in setup.gammas:
            label = f"{name} {g if g == 'auto' else f'g={g}'}"
            configs.append(Config(label, drafter=name, gamma=g))
    if setup.llama_cpp_bin is not None:
        found = llamacpp.find_binaries(setup.llama_cpp_bin)
        for n in setup.llama_draft_lengths:
            if llamacpp.LOOKUP in found:
                configs.append(Config(f"llama-lookup n={n}", llamacpp.LOOKUP, None, n))
        for name, d in drafters.items():
            if d.model is None or llamacpp.SPECULATIVE not in found:
                continue
            for n in setup.llama_draft_lengths:
                label = f"llama-spec {name} n={n}"
                configs.append(Config(label, llamacpp.SPECULATIVE, str(d.model.path), n))
        if llamaserver.find_server(setup.llama_cpp_bin) is not None:
            for t in setup.llama_server_types:
                configs.append(Config(llamaserver.label(t), llamaserver.SERVER, None, t))
    return configs


def run_bench(setup: BenchSetup) -> tuple[Records, dict]:
    """Run everything; the per-rep records and facts about the run (models, threads, curves)."""
    check_setup(setup)
    target, _ = load_pair(
        setup.target, None, LoadOptions(n_ctx=setup.n_ctx, n_threads=setup.threads, rpc=setup.rpc)
    )
    # a chat template that fails fails here, before drafters load or anything is timed
    workloads = [render_workload(target, w) for w in setup.workloads]
    drafters: dict[str, LoadedDrafter] = {}
    for spec in setup.drafters:
        drafters[short_name(spec)] = LoadedDrafter.load(spec, target, setup)
    bins = llamacpp.find_binaries(setup.llama_cpp_bin) if setup.llama_cpp_bin else {}
    server = llamaserver.find_server(setup.llama_cpp_bin) if setup.llama_cpp_bin else None
    if server is not None:
        bins[llamaserver.SERVER] = server
    configs = configs_for(setup, drafters)
    curves = _warm_up(target, drafters, setup)
    records: Records = {}
    depth_ceilings: dict[str, dict] = {}
    for w in workloads:
        max_tokens = setup.max_tokens if setup.max_tokens is not None else w.max_tokens
        per: dict[str, list[RunRecord | None]] = {c.label: [] for c in configs}
        for rep in range(setup.reps):
            order = configs if rep % 2 == 0 else configs[::-1]
            for c in order:
                try:
                    if c.kind == "edgespec":
                        rec = _run_edgespec(target, drafters, c, w, max_tokens, rep)
                    elif c.kind == llamaserver.SERVER:
                        rec = llamaserver.run(
                            bins[c.kind], w, max_tokens=max_tokens, seed=rep,
                            target=target.path, spec_type=str(c.gamma), threads=target.n_threads,
                            n_ctx=setup.n_ctx, swa_full=setup.llama_swa_full,
                            no_repack=cpu_has_amx(),
                        ).to_record()  # fmt: skip
                    else:
                        rec = _run_llamacpp(bins[c.kind], target, c, w, max_tokens, rep, setup)
                except llamacpp.LlamaCppError as e:
                    setup.log(f"  {w.name} rep {rep + 1} {c.label}: FAILED: {e}")
                    rec = None
                per[c.label].append(rec)
                if rec is not None:
                    setup.log(
                        f"  {w.name} rep {rep + 1}/{setup.reps} {c.label:<28} "
                        f"{rec.tokens_per_second:7.1f} tok/s  {rec.generated} tokens"
                    )
        records[w.name] = per
        depth_ceilings[w.name] = measure_depth_ceiling(target, w, max_tokens)
    info = {
        "target": str(target.path),
        "target_size_bytes": target.path.stat().st_size,
        "threads": target.n_threads,
        "rpc": list(target.rpc),
        "n_ctx": setup.n_ctx,
        "drafters": {
            spec: {
                "model": str(d.model.path) if d.model is not None else None,
                "cost_ratio": d.cost_ratio(target),
            }
            for spec, d in drafters.items()
        },
        "configs": [c.__dict__ for c in configs],
        "calibration": curves,
        "llama_cpp_binaries": {k: str(v) for k, v in bins.items()},
        # llama.cpp's defaults, but on a CPU with AMX, where its repacking crashes
        "llama_cpp_no_repack": cpu_has_amx(),
        "depth_ceilings": depth_ceilings,
        "prompt_tokens": {
            w.name: len(target.tokenize(w.prompt, add_special=True, parse_special=True))
            for w in workloads
        },
    }
    return records, info


def check_setup(setup: BenchSetup) -> None:
    """Refuse what would give two configurations (or workloads) one label: the report keys
    its rows by label, so one would be lost or their repetitions mixed."""
    by_label: dict[str, list[str]] = {}
    for spec in setup.drafters:
        by_label.setdefault(short_name(spec), []).append(spec)
    for label, specs in by_label.items():
        if len(set(specs)) > 1:
            raise InvalidParameterError(
                f"drafters {', '.join(specs)} would share the label {label!r}: "
                "give their files different names"
            )
    for what, values in (
        ("drafter", setup.drafters),
        ("workload", [w.name for w in setup.workloads]),
        ("gamma", setup.gammas),
        ("llama draft length", setup.llama_draft_lengths),
    ):
        twice = [v for i, v in enumerate(values) if v in values[:i]]
        if twice:
            raise InvalidParameterError(f"{what} {twice[0]} is given more than once")


def render_workload(target: LlamaModel, w: Workload) -> Workload:
    """w with its prompt as every run gets it: a chat workload's prompt as one user turn (or
    its messages, the assistant's turn begun) in the target's chat template (as is without
    one; messages get ChatML, as llama-server gives such a model), so that edgespec,
    llama.cpp's binaries and the prompt-token counts all see the same text."""
    template = target.chat_template() if w.chat else None
    if w.messages and not template:
        template = CHATML
    if not template:
        return w
    messages = [{"role": r, "content": c} for r, c in w.messages] or [
        {"role": "user", "content": w.prompt}
    ]
    prompt = ChatFormat.of(target, template).render(messages)
    return replace(w, prompt=prompt, chat=False)


def measure_depth_ceiling(target: LlamaModel, w: Workload, max_tokens: int) -> dict:
    """The verify-cost ceiling at the depth where the workload's generation runs.

    Attention over the context is paid per verified row, so a batch costs relatively
    more next to one token deep in a long prompt than in the calibration's short one.
    Measured at the prompt plus half the new tokens: the best k * cost(1) / cost(k)
    over CEILING_SIZES, medians of CEILING_REPS timings.
    """
    tokens = target.tokenize(w.prompt, add_special=True, parse_special=True)
    sizes = [k for k in CEILING_SIZES if k <= target.n_batch]
    depth = min(len(tokens) + max_tokens // 2, target.n_ctx - sizes[-1])
    filler = tokens * (1 + (depth + sizes[-1]) // max(1, len(tokens)))
    target.reset()
    if depth > 0:
        target.decode(filler[:depth], logits="none")
    seconds: dict[int, float] = {}
    for k in sizes:
        samples = []
        for _ in range(CEILING_REPS):
            t0 = time.perf_counter()
            target.decode(filler[depth : depth + k], logits="all")
            samples.append(time.perf_counter() - t0)
            target.truncate(depth)
        seconds[k] = statistics.median(samples)
    target.reset()
    batch, speedup = ceiling_at(seconds)
    return {"depth": depth, "batch": batch, "speedup": speedup, "seconds": seconds}


def _warm_up(target: LlamaModel, drafters: dict[str, LoadedDrafter], setup: BenchSetup) -> dict:
    """Page the weights in and make sure cost curves are cached, before anything is timed."""
    setup.log("warming up (and calibrating cost curves if not cached)")
    generate(target, "Hello", max_tokens=4, gamma=0)
    curves: dict[str, list[float]] = {}
    if drafters:
        curve = load_or_measure(target)
        for _ in range(CALIBRATION_RETRIES):
            if not curve.noisy:
                break
            setup.log("  the target's cost curve was noisy (a busy machine?): measuring again")
            curve = load_or_measure(target, refresh=True)
        curves["target_noisy"] = [float(curve.noisy)]
    for spec, d in drafters.items():
        drafter = d.fresh()
        policy = make_policy(target, drafter, calibrate=True)
        curves["target"] = list(policy.verify.seconds)
        curves[f"{spec} draft_step_s"] = [policy.draft_step_s]
        generate(target, "Hello", drafter=d.fresh(), max_tokens=4, gamma=2)
    target.reset()
    return curves


def _run_edgespec(
    target: LlamaModel,
    drafters: dict[str, LoadedDrafter],
    c: Config,
    w: Workload,
    max_tokens: int,
    rep: int,
) -> RunRecord:
    target.reset()
    drafter = drafters[c.drafter].fresh() if c.drafter is not None else None
    accepted: list[int] = []
    drafted: list[int] = []
    done: DoneEvent | None = None
    reset_peak_rss()
    for ev in stream_generate(
        target,
        w.prompt,
        drafter=drafter,
        max_tokens=max_tokens,
        sampling=SamplingParams(temperature=w.temperature),
        gamma=c.gamma if drafter is not None else 0,
        seed=rep,
    ):
        if isinstance(ev, RoundEvent) and ev.drafted > 0:
            accepted.append(ev.accepted)
            drafted.append(ev.drafted)
        elif isinstance(ev, DoneEvent):
            done = ev
    assert done is not None
    s = done.stats
    return RunRecord(
        tokens_per_second=s.tokens_per_second,
        generated=s.generated,
        drafted=s.drafted,
        accepted=s.accepted,
        rounds=s.rounds,
        target_calls=s.target_calls,
        draft_s=s.draft_s,
        verify_s=s.verify_s,
        other_s=s.other_s,
        decode_s=s.decode_s,
        prompt_s=s.prompt_s,
        peak_rss_mib=peak_rss_mib(),
        accepted_lengths=accepted,
        drafted_lengths=drafted,
    )


def _run_llamacpp(
    binary: Path,
    target: LlamaModel,
    c: Config,
    w: Workload,
    max_tokens: int,
    rep: int,
    setup: BenchSetup,
) -> RunRecord:
    cmd = llamacpp.command(
        binary,
        target=target.path,
        workload=w,
        max_tokens=max_tokens,
        threads=target.n_threads,
        n_ctx=setup.n_ctx,
        n_draft=int(c.gamma),
        seed=rep,
        draft=Path(c.drafter) if c.drafter else None,
        swa_full=setup.llama_swa_full,
        no_repack=cpu_has_amx(),
    )
    result, rss = llamacpp.run(cmd)
    return result.to_record(rss)
