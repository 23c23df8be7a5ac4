"""``edgespec.doctor``: measure this machine and build, predict each drafter's speed-up,
time it, check exactness, recommend.

One process, the bench's way: the target and every drafter loaded once, the target's
cost curve from the cache (measured if absent), then repetitions that run plain
decoding and each drafter on every prompt, alternating, from empty caches, greedy.
Before them a short probe run per drafter measures its acceptance to pick the gamma
it is then measured at (unless ``gamma`` is given). Every speculative output is
compared with the plain output of its prompt, token for token.

The prediction prices each round's verify as the timed runs measured it (the median
round of its size over the median plain step): the calibrated curve was measured at
a depth of 64 tokens, perhaps on a quieter or busier machine, and the report shows
where the two disagree.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from ..backend import LlamaModel
from ..bench.runner import LoadedDrafter, short_name
from ..bench.stats import median
from ..drafting import Drafter, build_drafter
from ..errors import InvalidParameterError
from ..loading import LoadOptions, load_pair, resolve_model
from ..policy.costs import (
    MAX_VERIFY,
    CostCurve,
    cached_curve,
    calibration_file,
    curve_origin,
    load_or_measure,
    machine_key,
    read_cache,
)
from ..speculation.loop import generate
from . import predict
from .environment import environment
from .prompts import Prompt, default_prompts, history_prompts, read_prompts
from .report import DoctorReport, DrafterResult, VerifyCurve
from .timing import Run, exactness, measure, measured_ratios, probe, rate
from .verdict import recommend, verdict

DEFAULT_MAX_TOKENS = 64
DEFAULT_REPS = 3
DEFAULT_BUDGET_S = 60.0


def doctor(
    target: str,
    drafts: Sequence[str] = ("ngram",),
    *,
    prompts_file: str | Path | None = None,
    history_file: str | Path | None = None,
    prompts: Sequence[str] | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    gamma: int | None = None,
    reps: int = DEFAULT_REPS,
    budget_s: float = DEFAULT_BUDGET_S,
    options: LoadOptions | None = None,
    log: Callable[[str], object] | None = None,
) -> DoctorReport:
    """Check this machine and build for ``target`` and each of ``drafts``.

    Args:
        target: a ``.gguf`` path or model name.
        drafts: drafter specs to compare (``ngram``, a model path or name, ``ngram+MODEL``).
        prompts_file: JSON lines with a ``prompt`` or ``messages`` field each.
        history_file: the lookup history a server saved (``serve --history-file``).
        prompts: prompt texts (else the file's, else three shipped workloads).
        max_tokens: tokens generated per prompt and run.
        gamma: measure every drafter at this draft length (default: the one its probe's
            acceptance predicts best).
        reps: most repetitions; fewer when ``budget_s`` seconds are spent.
        options: how the models load (threads, context, GPU layers).
        log: told of progress, a line at a time.

    Returns a DoctorReport; ``report.ok`` is False where greedy speculative output
    differed from plain. Raises EdgespecError subclasses (one line) for bad input.
    """
    t0 = time.perf_counter()
    say = log or (lambda _line: None)
    if reps < 1 or max_tokens < 2 or budget_s <= 0:
        raise InvalidParameterError("reps must be >= 1, max_tokens >= 2 and budget_s > 0")
    if gamma is not None and not 1 <= gamma < MAX_VERIFY:
        raise InvalidParameterError(f"gamma must be 1..{MAX_VERIFY - 1}, got {gamma}")
    specs = _check_specs(drafts)
    chosen = read_prompts(prompts_file) if prompts_file is not None else None
    opts = options or LoadOptions()
    model, _ = load_pair(target, None, opts)
    drafters: dict[str, LoadedDrafter] = {}
    try:
        if history_file is not None:
            chosen = history_prompts(history_file, max_tokens=max_tokens, model=model.path.name)
        if chosen is None:
            chosen = [Prompt(f"prompt {i + 1}", text=p) for i, p in enumerate(prompts or [])]
            chosen = chosen or default_prompts()
        rendered = [_fitting(p, model, max_tokens) for p in chosen]
        for s in specs:
            drafters[short_name(s)] = _load_drafter(s, model, opts)
        curve = _curve(model, say)
        ratio = _ratio(curve)
        say("warming up")
        generate(model, "Hello", max_tokens=4, gamma=0)
        for d in drafters.values():
            generate(model, "Hello", drafter=d.fresh(), max_tokens=4, gamma=2)
        max_gamma = min(MAX_VERIFY, model.n_batch) - 1
        timed = set(curve.timed_sizes())
        gammas, probes = dict.fromkeys(drafters, gamma or 0), {}
        if gamma is None:
            limits = (timed, max_gamma, max_tokens)
            gammas, probes = probe(model, drafters, rendered, curve.cost(1), ratio, limits, say)
        runs = measure(model, drafters, rendered, gammas, (max_tokens, reps, t0, budget_s), say)
        plain = runs["plain"]
        step_s = sum(r.decode_s for r in plain) / max(1, sum(r.generated for r in plain))
        in_runs = measured_ratios(runs)
        results = [
            _result(spec, label, gammas[label], runs, len(rendered), step_s, (ratio, in_runs))
            for label, spec in zip(drafters, specs, strict=True)
        ]
        exact = exactness(runs, probes, len(rendered))
        return DoctorReport(
            target=str(model.path),
            environment=environment(model, opts.gpu_layers),
            curve=VerifyCurve(
                step_ms=step_s * 1000,
                ratio_8=ratio(8),
                regime=predict.regime(ratio(8)),
                ratios={k: ratio(k) for k in sorted(timed) if k <= max_gamma + 1},
                origin=_origin(curve),
                noisy=curve.noisy,
                measured=in_runs,
            ),
            prompts=[p.name for p in chosen],
            max_tokens=max_tokens,
            reps=len(plain) // len(rendered),
            plain_tokens_per_second=1.0 / step_s if step_s > 0 else 0.0,
            drafters=results,
            exactness=exact,
            recommendation=recommend(results, exact, ratio),
            elapsed_s=time.perf_counter() - t0,
        )
    finally:
        for d in drafters.values():
            if d.model is not None:
                d.model.close()
        model.close()


def _fitting(prompt: Prompt, model: LlamaModel, max_tokens: int) -> str | list[int]:
    """The prompt rendered; InvalidParameterError (one line) where it and max_tokens
    would not fit the context."""
    rendered = prompt.render(model)
    if isinstance(rendered, list):
        n = len(rendered)
    else:
        n = len(model.tokenize(rendered, parse_special=True))
    if n + max_tokens > model.n_ctx:
        raise InvalidParameterError(
            f"{prompt.name}: its {n} tokens and {max_tokens} to generate exceed the "
            f"{model.n_ctx}-token context (--ctx)"
        )
    return rendered


def _check_specs(drafts: Sequence[str]) -> list[str]:
    specs = [d.strip() for d in drafts if d and d.strip()]
    if not specs:
        raise InvalidParameterError("give at least one drafter to check (e.g. ngram)")
    labels = [short_name(s) for s in specs]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise InvalidParameterError(f"drafter {twice[0]!r} is given more than once")
    return specs


def _load_drafter(spec: str, target: LlamaModel, opts: LoadOptions) -> LoadedDrafter:
    def build() -> Drafter | None:
        return build_drafter(
            target,
            spec,
            resolve=resolve_model,
            n_ctx=target.n_ctx,
            n_threads=target.n_threads,
            gpu_layers=opts.draft_gpu_layers,
        )

    return LoadedDrafter(spec, build)


def _curve(model: LlamaModel, say: Callable[[str], object]) -> CostCurve:
    """The target's verify-cost curve: the cached one, a provisional one included (a
    busy machine's, or one measured between rounds), else measured now and cached."""
    max_k = min(MAX_VERIFY, model.n_batch)
    key = machine_key(model, max_k)
    cached = cached_curve(read_cache(calibration_file()).get(key), key, max_k)
    if cached is not None:
        return cached
    say("measuring the target's verify-cost curve (once per model, machine and threads)")
    return load_or_measure(model)


def _origin(curve: CostCurve) -> str:
    if curve.provisional:
        return "cached, provisional (measured on a busy machine or between rounds)"
    return curve_origin(curve)


def _ratio(curve: CostCurve) -> Callable[[int], float]:
    one = curve.cost(1)
    return lambda k: curve.cost(k) / one


def _result(
    spec: str,
    label: str,
    gamma: int,
    runs: dict[str, list[Run]],
    n_prompts: int,
    step_s: float,
    ratios: tuple[Callable[[int], float], dict[int, float]],
) -> DrafterResult:
    """A drafter's acceptance, draft cost, predicted and measured speed-ups.

    ratios: the calibrated verify ratio, and the ones the runs measured by batch size;
    the prediction prices each round's verify as the runs measured it where they did."""
    calibrated, in_runs = ratios

    def priced(k: int) -> float:
        return in_runs.get(k, calibrated(k))

    mine, plain = runs[label], runs["plain"]
    rounds = [r for run in mine for r in run.pairs]
    alpha = predict.alpha_of(rounds)
    drafted = sum(d for d, _ in rounds)
    c = sum(r.draft_s for r in mine) / drafted / step_s if drafted and step_s > 0 else 0.0
    lengths = [d for d, _ in rounds]
    pred, tokens, cost = (1.0, 1.0, 1.0)  # nothing drafted: plain rounds
    constant = 1.0
    if alpha is not None:
        by_position = predict.acceptance_by_position(rounds)
        pred, tokens, cost = predict.speedup_of_rounds(by_position, lengths, c, priced)
        constant = predict.speedup_of_rounds(alpha, lengths, c, priced)[1]
    k = n_prompts  # runs are in prompt order, one repetition after another
    measured_reps = [
        rate(mine[i : i + k]) / rate(plain[i : i + k]) for i in range(0, len(plain), k)
    ]
    decode = sum(r.decode_s for r in mine)
    result = DrafterResult(
        spec=spec,
        label=label,
        gamma=gamma,
        alpha=alpha,
        draft_cost=c,
        proposal_rate=sum(1 for d in lengths if d > 0) / len(lengths) if lengths else 0.0,
        verify_ratio=priced(gamma + 1),
        calibrated_ratio=calibrated(gamma + 1),
        tokens_per_round=tokens,
        tokens_per_round_constant=constant,
        tokens_per_round_measured=sum(a + 1 for _, a in rounds) / len(rounds) if rounds else 1.0,
        round_cost=cost,
        predicted=pred,
        measured=median(measured_reps) if measured_reps else None,
        measured_reps=measured_reps,
        drafted=drafted,
        accepted=sum(a for _, a in rounds),
        rejections=sum(1 for d, a in rounds if a < d),
        tokens_per_second=sum(r.generated for r in mine) / decode if decode > 0 else 0.0,
    )
    return verdict(result)
