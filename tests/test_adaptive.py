"""The adaptive draft-length policy and its cost model."""

from __future__ import annotations

import json
import math

import pytest

from edgespec.backend import LlamaModel
from edgespec.drafting import CompositeDrafter, ModelDrafter
from edgespec.drafting.ngram import NgramDrafter
from edgespec.policy import adaptive, costs, gap_calibration
from edgespec.policy.adaptive import FIRST_PROBE_AFTER, AdaptiveGamma
from edgespec.policy.costs import CostCurve, load_or_measure
from edgespec.speculation.loop import generate
from edgespec.speculation.planning import resolve_gamma

# Measured shape on this project's 2-core CPUs (Gemma 3 270M): k=2 2.2x, 4 3x, 8 3.7x, 16 5x.
CPU_RATIOS = [1.0, 2.2, 2.6, 3.0, 3.2, 3.35, 3.5, 3.6, 3.7, 3.85, 4.0, 4.2, 4.4, 4.6, 4.8, 5.0, 5.1]
CPU = CostCurve(model="m", key="k", seconds=tuple(0.01 * r for r in CPU_RATIOS))
GPU_LIKE = CostCurve(model="m", key="k", seconds=tuple(0.01 * (1 + 0.02 * k) for k in range(17)))
# the same, timed up to a 48-row batch (as the old linear extrapolation priced it)
CPU_48 = CostCurve(
    model="m",
    key="k",
    seconds=tuple(0.01 * r for r in CPU_RATIOS + [5.1 + 0.1 * i for i in range(1, 32)]),
)
# Measured with 2 threads (Gemma 3 270M): rows go through the matmul four at a time,
# so 8 rows cost less than 5, 6 or 7, and 12 less than 9, 10 or 11
STAIRS_RATIOS = [1.0, 1.79, 2.09, 2.24, 3.45, 3.75, 4.06, 3.29]  # 1-8 rows
STAIRS_RATIOS += [4.47, 4.75, 5.0, 4.31, 5.5, 5.82, 6.13, 5.32]  # 9-16 rows


def policy_with_rate(curve: CostCurve, rate: float, *, step: float = 0.0) -> AdaptiveGamma:
    p = AdaptiveGamma(curve, draft_step_s=step)
    p.accept.tries = [1000.0] * p.max_gamma  # well-observed: `rate` at every position
    p.accept.hits = [rate * 1000.0] * p.max_gamma
    return p


def test_no_drafting_when_it_cannot_pay() -> None:
    # E(1) = 1.5 tokens for 2.2x the cost of a plain round: plain decoding wins
    assert policy_with_rate(CPU, 0.5).choose(16) == 0
    assert policy_with_rate(CPU, 0.0).choose(16) == 0


def test_long_drafts_when_acceptance_is_high() -> None:
    g = policy_with_rate(CPU, 0.97).choose(16)
    assert g >= 8
    p = policy_with_rate(CPU, 0.97)
    best = max(range(17), key=lambda k: p.expected_tokens(k) / p.round_cost(k))
    assert g == best


def test_cheap_verification_drafts_even_at_modest_acceptance() -> None:
    assert policy_with_rate(GPU_LIKE, 0.5).choose(16) >= 3
    assert policy_with_rate(CPU, 0.5).choose(16) == 0


def test_choice_respects_the_limit_and_the_draft_cost() -> None:
    assert policy_with_rate(CPU, 0.97).choose(3) <= 3
    assert policy_with_rate(CPU, 0.97, step=0.02).choose(16) < policy_with_rate(CPU, 0.97).choose(
        16
    )


def test_estimates_follow_the_text() -> None:
    p = AdaptiveGamma(CPU, draft_step_s=0.0)
    for _ in range(60):
        p.observe(8, 8, verify_s=CPU.cost(9))
    assert p.choose(16) >= 8
    for _ in range(60):
        p.observe(4, 0, verify_s=CPU.cost(5))
    assert p.choose(16) == 0


def test_model_drafter_is_probed_with_backoff() -> None:
    p = policy_with_rate(GPU_LIKE, 0.0, step=0.005)
    choices = [p.choose(16) for _ in range(FIRST_PROBE_AFTER * 7)]
    probes = [i for i, g in enumerate(choices) if g]
    assert probes[:2] == [FIRST_PROBE_AFTER - 1, 3 * FIRST_PROBE_AFTER - 1]
    assert len(probes) <= 3  # the cost of probing shrinks: 8, then 16, then 32 rounds apart


def test_no_probe_where_a_first_draft_token_is_always_refused() -> None:
    """On the CPU curve a 2-row verify costs 2.2 plain rounds: the early stop refuses a
    first draft token even at certainty, so a probe would only pay the draft's catch-up."""
    p = policy_with_rate(CPU, 0.0, step=0.005)
    assert not p.keep_drafting(1, 1.0)
    assert not any(p.choose(16) for _ in range(FIRST_PROBE_AFTER * 7))


@pytest.mark.parametrize("drafted", [1, 0])
def test_a_draft_as_slow_as_the_target_stops_being_probed(drafted) -> None:
    """Calibrated at 1 ms a step, the draft's probe round took 50 ms (its catch-up and
    step; drafted 0: the early stop kept nothing): at that price no draft can pay, so
    the policy stops probing."""
    p = policy_with_rate(GPU_LIKE, 0.0, step=0.001)
    choices = [p.choose(16) for _ in range(FIRST_PROBE_AFTER)]
    assert choices[-1] == 1  # the first probe
    p.observe(drafted, 0, verify_s=GPU_LIKE.cost(drafted + 1), draft_s=0.05)
    assert p.draft_scale > 10
    assert not any(p.choose(16) for _ in range(FIRST_PROBE_AFTER * 7))


def test_cost_scale_tracks_measured_verify_times() -> None:
    p = AdaptiveGamma(CPU, draft_step_s=0.0)
    for _ in range(100):
        p.observe(0, 0, verify_s=2 * CPU.cost(1))
    assert p.scale == pytest.approx(2.0, rel=0.01)
    assert p.round_cost(0) == pytest.approx(2 * CPU.cost(1), rel=0.01)


def test_a_wrong_calibration_is_corrected_by_measured_rounds() -> None:
    """A curve measured on a busy machine says a 2-token verify costs 1.06x one token."""
    flat = CostCurve(
        model="m", key="k", seconds=(0.010, 0.0106, *(0.011 + 0.001 * k for k in range(15)))
    )
    p = policy_with_rate(flat, 0.3)
    assert p.choose(16) > 0  # believed: drafting is nearly free
    for _ in range(40):  # what rounds really cost: the CPU curve
        g = p.choose(16)
        p.observe(g, 0, verify_s=CPU.cost(g + 1))
        p.accept.tries = [1000.0] * p.max_gamma
        p.accept.hits = [300.0] * p.max_gamma
    assert p.choose(16) == 0


def test_calibration_is_cached(synthetic_models, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EDGESPEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(costs, "NOISY_SPREAD", float("inf"))  # however busy the machine
    monkeypatch.setattr(costs, "_process_curves", {})
    with LlamaModel(synthetic_models["target"], n_ctx=256, n_threads=1) as m:
        curve = load_or_measure(m, max_k=5)
        assert len(curve.seconds) == 5 and all(s > 0 for s in curve.seconds)
        assert curve.timed == (1, 2, 3, 4, 5)
        cached = json.loads((tmp_path / "calibration.json").read_text())
        assert curve.key in cached
        cached[curve.key]["seconds"] = [1, 2, 3, 4, 5]
        (tmp_path / "calibration.json").write_text(json.dumps(cached))
        costs._process_curves.clear()
        assert load_or_measure(m, max_k=5).seconds == (1, 2, 3, 4, 5)
        (tmp_path / "calibration.json").write_text("{not json")
        costs._process_curves.clear()
        assert len(load_or_measure(m, max_k=5).seconds) == 5  # corrupt cache: measured again
        nan, inf = [float("nan"), 1, 2, 3, 4], [1, 2, 3, 4, float("inf")]
        for bad in (
            {"model": "m", "seconds": "fast"},
            {"model": "m", "seconds": [1, 2]},
            {"model": "m", "seconds": nan},  # json writes NaN and reads it back
            {"model": "m", "seconds": inf},
        ):
            (tmp_path / "calibration.json").write_text(json.dumps({curve.key: bad}))
            costs._process_curves.clear()
            again = load_or_measure(m, max_k=5)  # a malformed entry: measured again
            assert len(again.seconds) == 5 and again.timed == (1, 2, 3, 4, 5)
            assert all(math.isfinite(x) for x in again.seconds)


def test_two_threads_writing_the_cache_never_leave_it_broken(tmp_path) -> None:
    # a server's sessions calibrate in threads of one process: they once shared one
    # temporary file, and readers saw half-written JSON (then measured everything again)
    import threading

    path, done, broken = tmp_path / "calibration.json", threading.Event(), []

    def write(tag: str) -> None:
        for _ in range(200):
            costs._write_cache(path, {tag: list(range(300))})

    def read() -> None:
        while not done.is_set():
            try:
                json.loads(path.read_text())
            except FileNotFoundError:
                continue
            except ValueError as e:
                broken.append(e)

    writers = [threading.Thread(target=write, args=(t,)) for t in "ab"]
    reader = threading.Thread(target=read)
    for t in (reader, *writers):
        t.start()
    for t in writers:
        t.join()
    done.set()
    reader.join()
    assert broken == []
    assert [p.name for p in tmp_path.iterdir()] == ["calibration.json"]


def test_a_noisy_calibration_is_cached_as_provisional(
    synthetic_models, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("EDGESPEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(costs, "NOISY_SPREAD", 0.0)  # every repetition counts as disturbed
    monkeypatch.setattr(costs, "_process_curves", {})
    with LlamaModel(synthetic_models["target"], n_ctx=256, n_threads=1) as m:
        curve = load_or_measure(m, max_k=3)
        # later calls in this process reuse it: measuring again would empty the KV cache
        tokens = m.tokenize("the cat sat")
        m.decode(tokens, logits="none")
        assert load_or_measure(m, max_k=3) is curve
        assert m.tokens == tokens
    assert curve.noisy and curve.provisional
    # kept (it was discarded, and every later run paid for a calibration again) ...
    entry = json.loads((tmp_path / "calibration.json").read_text())[curve.key]
    assert entry["provisional"] is True
    # ... and used by --gamma auto in a later process, which refines it between rounds
    monkeypatch.setattr(costs, "_process_curves", {})
    monkeypatch.setattr(costs, "_gap_calibrations", {})
    with LlamaModel(synthetic_models["target"], n_ctx=256, n_threads=1) as m:
        used, gaps = gap_calibration.policy_curve(m, max_k=3)
        assert used.seconds == curve.seconds and gaps is not None
        assert costs.curve_origin(used) == costs.ORIGIN_PROVISIONAL
        # an explicit calibration (calibrate, bench) measures it again
        assert load_or_measure(m, max_k=3) is not used


@pytest.mark.parametrize("draft", ["draft_same", "draft_unrelated", "ngram"])
def test_auto_gamma_keeps_greedy_output_exact(synthetic_models, draft: str) -> None:
    prompt = "the cat sat on the mat and the dog sat on the mat and the cat"
    with (
        LlamaModel(synthetic_models["target"], n_ctx=512, n_threads=1) as target,
        LlamaModel(synthetic_models["draft_unrelated"], n_ctx=512, n_threads=1) as other,
        LlamaModel(synthetic_models["draft_same"], n_ctx=512, n_threads=1) as same,
    ):
        drafter = {
            "draft_same": ModelDrafter(same),
            "draft_unrelated": ModelDrafter(other),
            "ngram": NgramDrafter(),
        }[draft]
        plain = generate(target, prompt, max_tokens=60, gamma=0)
        auto = generate(target, prompt, drafter=drafter, max_tokens=60, gamma="auto")
        assert auto.tokens == plain.tokens
        s = auto.stats
        assert len(s.position_acceptance) == len(s.position_tried)
        if draft == "draft_unrelated":
            assert s.gamma_mean < 0.5  # learns quickly that drafting does not pay


def test_untried_positions_inherit_the_estimate_before_them() -> None:
    p = AdaptiveGamma(CPU, draft_step_s=0.0)
    for _ in range(30):  # the lookup was right at positions 1..3 every time
        p.observe(3, 3, verify_s=CPU.cost(4))
    assert p.accept.rate(8) > 0.9  # so positions never tried look promising too
    assert p.choose(16) > 3


def test_no_probes_when_even_full_acceptance_cannot_pay() -> None:
    # a draft step as slow as a target step (a model drafting for itself on this CPU)
    p = policy_with_rate(CPU, 0.0, step=CPU.cost(1))
    assert not any(p.choose(16) for _ in range(FIRST_PROBE_AFTER * 8))


def test_a_miss_makes_the_next_draft_short_until_drafts_hit_again() -> None:
    # misses cluster where the output stops copying its source: after one, the policy
    # uses what it learned about rounds that follow a miss, not the long-run rate
    p = AdaptiveGamma(CPU, draft_step_s=0.0)
    for _ in range(30):
        p.observe(16, 16, verify_s=CPU.cost(17))
    long = p.choose(16)
    assert long >= 12
    p.observe(16, 1, verify_s=CPU.cost(17))  # the copy breaks off
    assert p.choose(16) < long / 2
    p.observe(2, 2, verify_s=CPU.cost(3))  # a hit: back to the copying estimates
    assert p.choose(16) >= 12
    for _ in range(5):  # where rounds after a miss keep missing, they stay short
        p.observe(16, 1, verify_s=CPU.cost(17))
        p.observe(4, 0, verify_s=CPU.cost(5))
    assert p.choose(16) == 0


def test_unseen_batch_sizes_are_scaled_like_the_seen_ones() -> None:
    # a deeper context than the calibration's makes every size ~20% dearer: after one
    # plain round, a 4-token verify must not look cheaper relative to plain than calibrated
    p = AdaptiveGamma(CPU, draft_step_s=0.0)
    p.observe(0, 0, verify_s=1.2 * CPU.cost(1))
    assert p.round_cost(3) / p.round_cost(0) == pytest.approx(CPU.cost(4) / CPU.cost(1))


def test_calibrate_command_measures_once_and_shows_the_timed_sizes(synthetic_models) -> None:
    from test_cli import run_cli

    args = ["calibrate", "--target", str(synthetic_models["target"]), "--threads", "1"]
    shown = run_cli(*args)
    assert shown.returncode == 0, shown.stderr
    rows = [line.split() for line in shown.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [int(r[0]) for r in rows] == list(costs.CALIBRATION_SIZES)
    one_ms = float(rows[0][1])
    ratios = [float(r[2]) for r in rows]  # each timed size against one token
    assert ratios[0] == 1.0 and all(r > 0 for r in ratios)
    again = json.loads(run_cli(*args, "--json").stdout)
    seconds = again["target"]["seconds"]
    assert len(seconds) == costs.MAX_VERIFY and all(s > 0 for s in seconds)
    assert again["target"]["timed"] == list(costs.CALIBRATION_SIZES)
    # the text and the JSON both say where each curve came from
    origins = (costs.ORIGIN_STORED, costs.ORIGIN_NOISY, costs.ORIGIN_CACHE)
    assert any(f"target: {o}" in shown.stdout for o in origins), shown.stdout
    if costs.ORIGIN_NOISY not in shown.stdout:  # microsecond timings of a tiny model can be noisy
        assert round(seconds[0] * 1000, 2) == one_ms  # from the cache this time
        assert again["target"]["origin"] == costs.ORIGIN_CACHE and again["target"]["cached"]
        assert again["target"]["noisy"] is False
    else:
        assert again["target"]["cached"] is True  # a noisy curve is cached as provisional
        assert again["target"]["noisy"] is (again["target"]["origin"] == costs.ORIGIN_NOISY)


def test_load_or_measure_says_where_each_curve_came_from(monkeypatch, tmp_path) -> None:
    """Each origin is reported: noisy (kept as provisional), stored, read back, unwritable."""
    from types import SimpleNamespace

    monkeypatch.setenv("EDGESPEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(costs, "machine_key", lambda model, max_k: f"k-{model.name}")
    noisy = {"a": True, "b": False}

    def fake_measure(model, *, max_k):
        secs = tuple(0.01 * (1 + i / 10) for i in range(max_k))
        return costs.CostCurve(
            model.name, f"k-{model.name}", secs, noisy=noisy[model.name], timed=(1, max_k)
        )

    monkeypatch.setattr(costs, "measure_curve", fake_measure)
    a, b = (SimpleNamespace(name=n, n_batch=costs.MAX_VERIFY) for n in "ab")
    assert costs.curve_origin(costs.load_or_measure(a)) == costs.ORIGIN_NOISY
    assert costs.curve_origin(costs.load_or_measure(b)) == costs.ORIGIN_STORED
    costs._process_curves.clear()
    assert costs.curve_origin(costs.load_or_measure(b)) == costs.ORIGIN_CACHE
    noisy["a"] = False
    (tmp_path / "calibration.json").unlink()
    (tmp_path / "calibration.json" / "x").mkdir(parents=True)  # not replaceable, even by root
    costs._process_curves.clear()
    assert costs.curve_origin(costs.load_or_measure(a)) == costs.ORIGIN_UNWRITABLE
    costs._process_curves.clear()


def test_a_miss_at_position_two_does_not_stop_drafting_for_good() -> None:
    # found in a trace: after a rejection, a round that missed at its 2nd token left
    # position 2's estimate low; plain rounds only scored position 1, so the policy
    # never drafted again although the lookup kept being right (640 plain rounds)
    p = AdaptiveGamma(CPU, draft_step_s=0.0)
    p.choose(16, match_len=8)
    p.observe(10, 0, verify_s=CPU.cost(11))  # a miss
    p.choose(16, match_len=8)
    p.observe(9, 1, verify_s=CPU.cost(10))  # ... and the next missed at position 2
    copy = list(range(1000, 1100))  # the text the lookup proposes, and the model writes
    chosen = []
    for i in range(60):
        g = p.choose(16, match_len=8)
        chosen.append(g)
        if g:
            break
        p.observe(0, 0, verify_s=CPU.cost(1))
        p.observe_free(copy[i : i + 16], copy[i])
    assert chosen[-1] > 0, "never drafted again"
    assert len(chosen) <= 30


def test_lookup_estimates_are_kept_apart_by_match_length() -> None:
    # text that has followed its source for 64 tokens keeps copying it; a fresh 2-token
    # match is often a coincidence: each keeps its own estimates
    p = AdaptiveGamma(CPU, draft_step_s=0.0)
    text = list(range(1000, 1400))  # what the model writes
    i = 0
    for _ in range(20):
        g = p.choose(16, match_len=2)  # a fresh match proposes [7, 8]: wrong
        p.observe(g, 0, verify_s=CPU.cost(g + 1))
        if g == 0:  # a plain round scores the proposal all the same
            p.observe_free([7, 8], text[i])
        i += 1
        g = p.choose(16, match_len=64)  # a long match proposes what follows: right
        p.observe(g, g, verify_s=CPU.cost(g + 1))
        if g == 0:
            p.observe_free(text[i : i + 16], text[i])
        i += g + 1
    assert p.choose(16, match_len=2) == 0
    assert p.choose(16, match_len=64) >= 12


def test_drafting_time_is_learned_from_the_rounds() -> None:
    # the calibration timed one draft step; real rounds (catch-up decodes, a
    # cross-vocabulary re-tokenisation) can take longer: the policy goes by them
    p = policy_with_rate(CPU, 0.95, step=0.002)
    g = p.choose(16)
    assert g > 0 and p.draft_scale == 1.0
    for _ in range(20):
        p.observe(g, g, verify_s=CPU.cost(g + 1), draft_s=4 * 0.002 * g)
    assert p.draft_scale == pytest.approx(4.0)
    assert p.round_cost(3) - p.round_cost(0) == pytest.approx(
        CPU.cost(4) - CPU.cost(1) + 3 * 4 * 0.002
    )
    assert p.choose(16) < g


def test_a_new_generation_keeps_the_estimates_and_drops_the_old_text() -> None:
    p = AdaptiveGamma(CPU, draft_step_s=0.0)
    text = list(range(1000, 1100))
    for i in range(10):  # plain rounds scoring a lookup that keeps being right
        p.choose(16, match_len=64)
        p.observe(0, 0, verify_s=CPU.cost(1))
        p.observe_free(text[i : i + 16], text[i])
    seen = p.observed
    assert seen > 0 and p.chosen
    p.start_generation()
    assert p.observed == seen and not p.chosen
    p.observe_free([5, 6], 7)  # the old proposal is not scored against the new text
    assert p.observed == pytest.approx(seen + 1)  # only position 1 of the new one


def test_a_long_copy_keeps_its_draft_length_when_long_batches_cost_more() -> None:
    # deep in a context a long verify costs 30% more than calibrated, a plain step what
    # was calibrated: a batch size not seen yet must be priced like the seen ones next
    # to it, not at the mean ratio, or the draft shrinks by one token every round
    p = AdaptiveGamma(CPU_48, draft_step_s=0.0)
    for _ in range(20):
        p.observe(0, 0, verify_s=CPU_48.cost(1))
    chosen = []
    for _ in range(8):
        g = p.choose(47, match_len=64)
        p.observe(g, g, verify_s=1.3 * CPU_48.cost(g + 1))
        chosen.append(g)
    assert chosen[0] > 0 and chosen[1:] == [47] * 7  # the first round learns the cost


def test_a_fresh_long_match_is_drafted_at_once_a_fresh_short_one_is_not() -> None:
    # text that agrees with its source for 16+ tokens goes on copying it in nearly every
    # text measured, so a long-match band starts confident; a short match starts neutral
    p = AdaptiveGamma(CPU, draft_step_s=0.0)
    assert p.choose(16, match_len=64) >= 12
    assert p.choose(16, match_len=20) >= 12
    assert p.choose(16, match_len=2) == 0
    assert p.choose(16, match_len=8) == 0
    # a long match that keeps missing loses its head start within a few rounds
    for _ in range(4):
        g = p.choose(16, match_len=64)
        p.observe(g, 0, verify_s=CPU.cost(g + 1))
    assert p.choose(16, match_len=64) == 0


def test_lookup_tokens_cost_no_draft_time_even_with_a_draft_model_behind() -> None:
    # a composite (ngram+MODEL) whose draft model is too slow to pay: its own drafts are
    # priced with the model's step, a lookup proposal is free
    p = policy_with_rate(CPU, 0.95, step=0.05)
    assert p.choose(16) == 0
    assert p.choose(16, match_len=64) >= 12
    assert p.round_costs(4, free_draft=True)[4] == pytest.approx(CPU.cost(5))


def test_a_composite_asks_its_lookup_before_choosing(synthetic_models) -> None:
    prompt = "the cat sat on the mat and the dog sat on the mat and the cat"
    seen: list[int | None] = []

    class Recording(AdaptiveGamma):
        def choose(self, limit: int, *, match_len: int | None = None, by_text: bool = False) -> int:
            seen.append(match_len)
            return super().choose(limit, match_len=match_len, by_text=by_text)

    with (
        LlamaModel(synthetic_models["target"], n_ctx=512, n_threads=1) as target,
        LlamaModel(synthetic_models["draft_same"], n_ctx=512, n_threads=1) as same,
    ):
        composite = CompositeDrafter(NgramDrafter(), ModelDrafter(same))
        policy = Recording(load_or_measure(target), draft_step_s=1e-4)
        plain = generate(target, prompt, max_tokens=60, gamma=0)
        auto = generate(target, prompt, drafter=composite, max_tokens=60, gamma=policy)
    assert auto.tokens == plain.tokens
    # the repeated prompt gives the lookup matches: those rounds are chosen knowing
    # their match length, the others (no match) fall back to the draft model
    assert any(m is not None for m in seen)
    if auto.stats.draft_calls == 0:  # only a draft model's rounds teach the draft time
        assert policy.draft_scale == 1.0


def test_only_timed_batch_sizes_are_drafted_and_a_cheaper_longer_batch_is_taken() -> None:
    # sizes 9-11 are interpolated, not timed: never chosen, and their measured times do
    # not correct the price of the timed sizes around them
    stairs = CostCurve(
        model="m",
        key="k",
        seconds=tuple(0.01 * r for r in STAIRS_RATIOS),
        timed=(1, 2, 3, 4, 5, 6, 7, 8, 12, 16),
    )
    p = policy_with_rate(stairs, 0.97)
    assert p.choose(10) == 7  # 8 rows: cheaper than 5, 6 or 7 rows, and 9-11 untimed
    assert p.choose(6) == 3  # 4 rows (2.24x) beat 5-7 rows (3.45x-4.06x) at this limit
    assert p.choose(16) == 15
    p.observe(10, 10, verify_s=2 * stairs.cost(11))
    assert 11 not in p.k_scale and p.scale == pytest.approx(2.0)
    p.observe(11, 11, verify_s=stairs.cost(12))
    assert p.k_scale[12] == pytest.approx(1.0)


def test_a_lookup_round_is_sized_to_its_proposal(synthetic_models) -> None:
    limits: list[int] = []

    class Recording(AdaptiveGamma):
        def choose(self, limit: int, *, match_len: int | None = None, by_text: bool = False) -> int:
            if match_len is not None:
                limits.append(limit)
            return super().choose(limit, match_len=match_len, by_text=by_text)

    prompt = [5, 6, 7, 8, 9, 10, 5, 6, 7]  # the tail 5 6 7 also opens the prompt
    with LlamaModel(synthetic_models["target"], n_ctx=256, n_threads=1) as target:
        policy = Recording(load_or_measure(target), draft_step_s=0.0)
        generate(target, prompt, drafter=NgramDrafter(), max_tokens=2, gamma=policy)
        generate(target, prompt, drafter=NgramDrafter(), max_tokens=40, gamma=policy)
    # the first proposal is what followed that 5 6 7, "8 9 10 5 6 7": 6 tokens; the
    # limit is the smaller of that and the room left (1 draft token when 2 are asked for)
    assert limits[0] == 1 and limits[1] == 6


def test_a_draft_that_cannot_pay_is_not_probed_when_the_target_slows_down() -> None:
    # at the calibrated costs even full acceptance loses (a draft step 0.9x a target
    # step); deep in a long prompt the target's steps take 1.3x as long, the draft's
    # are never timed: scaling the verify alone would make a probe look worth it
    p = AdaptiveGamma(CPU, draft_step_s=0.009)
    for _ in range(20):
        p.observe(0, 0, verify_s=1.3 * CPU.cost(1))
    assert [p.choose(16) for _ in range(4 * FIRST_PROBE_AFTER)] == [0] * (4 * FIRST_PROBE_AFTER)


class _Share:
    """A parallel slot's view of the joint decode, as the policy asks it."""

    def __init__(self, rows: int, shared: bool = True) -> None:
        self.rows, self.shared = rows, shared

    def rows_elsewhere(self) -> int:
        return self.rows

    def sequences_elsewhere(self) -> int:
        return min(self.rows, 2)

    def alone(self) -> bool:
        return self.rows == 0

    def last_was_shared(self) -> bool:
        return self.shared


def test_beside_other_sequences_a_draft_must_pay_for_everyone_it_delays() -> None:
    # beside 8 other rows a round costs the whole decode, C(8 + g + 1), which the
    # other sequences wait for too: a long draft that pays alone need not beside them
    fixed_heavy = CostCurve(
        model="m", key="k", seconds=tuple(0.05 + 0.002 * k for k in range(1, 49))
    )
    policy = AdaptiveGamma(fixed_heavy, draft_step_s=0.0)
    alone = policy.round_costs(4)
    shared = policy.round_costs(4, shared=8)
    assert alone[0] == pytest.approx(0.052) and shared[0] == pytest.approx(0.068)
    assert shared[4] - shared[0] == pytest.approx(alone[4] - alone[0])
    policy.share = _Share(8)
    for _ in range(50):
        policy.observe(4, 2, 0.06)  # (a shared decode: teaches acceptance, no cost scale)
    assert policy.scale == pytest.approx(1.0)
    policy.share = None
    g_alone = policy.choose(16, match_len=8)
    policy.share = _Share(8)
    g_shared = policy.choose(16, match_len=8)
    assert g_alone > 0 and g_shared < g_alone


def test_only_rounds_that_ran_the_draft_model_teach_its_step() -> None:
    """A plain round's draft_s is a few microseconds of bookkeeping: counted as a draft
    step it made drafting look free (draft_scale near 0). A round that ran the model
    and kept nothing counts as one step."""
    from edgespec.speculation.planning import RoundPlan, RoundPlanner, RoundResult

    p = AdaptiveGamma(GPU_LIKE, draft_step_s=0.01)

    class _Model:  # a model drafter's face; observe never calls it
        is_lookup = False

    planner = RoundPlanner(_Model(), p, 0)
    for _ in range(50):
        planner.observe(RoundPlan(0, None), RoundResult([], 0, 0, 7, 2e-6, GPU_LIKE.cost(1)))
    assert p.draft_scale == 1.0
    planner.observe(RoundPlan(3, None), RoundResult([], 1, 0, 7, 0.03, GPU_LIKE.cost(1)))
    assert p.draft_scale == pytest.approx(3.0)


def _run_wrong_estimates(curve: CostCurve, max_tokens: int) -> tuple[float, list[int]]:
    """A lookup that keeps proposing long matches the target never takes: the seconds
    lost against plain decoding over max_tokens tokens, and the lengths drafted."""
    p = AdaptiveGamma(curve, draft_step_s=0.0)
    p.start_generation(max_tokens)
    made, lost, chosen = 0, 0.0, []
    while made < max_tokens:
        g = p.choose(min(47, max_tokens - made - 1), match_len=30)  # a long band: prior 0.95
        p.observe(g, 0, verify_s=curve.cost(g + 1))  # the first draft token is wrong
        lost += curve.cost(g + 1) - curve.cost(1)
        made += 1
        chosen.append(g)
    return lost, chosen


def test_a_loss_budget_bounds_what_wrong_estimates_can_lose(monkeypatch) -> None:
    bound = 2 * adaptive.LOSS_SHARE * 48 * CPU_48.cost(1)  # a 48-token reply's
    lost, chosen = _run_wrong_estimates(CPU_48, 48)
    assert any(chosen)  # it did bet (the long band's prior says copy)...
    assert lost <= bound + 1e-9  # ... and lost a bounded share
    monkeypatch.setattr(adaptive, "LOSS_SHARE", math.inf)
    unbounded, _ = _run_wrong_estimates(CPU_48, 48)
    assert unbounded > bound  # without it the same bets lose more


def test_drafts_that_pay_earn_the_budget_for_longer_ones(monkeypatch) -> None:
    def first_choices(share: float) -> list[int]:
        monkeypatch.setattr(adaptive, "LOSS_SHARE", share)
        p = policy_with_rate(CPU_48, 0.97)
        p.start_generation(64)
        out = []
        for _ in range(4):
            g = p.choose(47)
            p.observe(g, g, verify_s=CPU_48.cost(g + 1))  # every draft token kept
            out.append(g)
        return out

    unbounded = first_choices(math.inf)
    budgeted = first_choices(0.03)
    assert 0 < budgeted[0] < unbounded[0]  # a short reply starts with a smaller bet
    assert budgeted[-1] == unbounded[-1]  # the time it saved pays for the long one


def test_generation_tells_the_policy_its_max_tokens() -> None:
    p = AdaptiveGamma(CPU, draft_step_s=0.0)
    assert resolve_gamma(p, None, NgramDrafter(), 40) is p  # type: ignore[arg-type]
    assert p.loss_budget(1.0) == pytest.approx(adaptive.LOSS_SHARE * 40)
    p.observe(3, 3, verify_s=CPU.cost(4))  # 4 tokens in 3.0 plain steps' time: 1 saved
    assert p.saved_s == pytest.approx(4 * CPU.cost(1) - CPU.cost(4))
    assert p.loss_budget(CPU.cost(1)) == pytest.approx(
        p.saved_s + adaptive.LOSS_SHARE * (40 + 4) * CPU.cost(1)
    )
