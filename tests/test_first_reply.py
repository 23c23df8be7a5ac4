"""--gamma auto on an empty cache: the first reply never waits for the cost curve (issue 18).

The curve is measured a batch at a time between rounds, each batch rolled back, so the
output is the target's own; the cache is keyed by what the model is, not where it lies;
a noisy or partly measured curve is kept as provisional, used, and measured again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from edgespec.backend import LlamaModel
from edgespec.completion.session import CompletionSession
from edgespec.drafting.ngram import NgramDrafter
from edgespec.events import TokenEvent
from edgespec.policy import adaptive, costs, gap_calibration
from edgespec.speculation.loop import generate, stream_generate

PROMPT = "the cat sat on the mat and the dog sat on the mat and the cat"


@dataclass
class FakeModel:
    """What machine_key reads of a model."""

    path: Path
    n_batch: int = 512
    n_threads: int = 1
    n_gpu_layers: int = 0


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private, empty cache and empty process caches; a full calibration is an error."""
    monkeypatch.setenv("EDGESPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(costs, "_process_curves", {})
    monkeypatch.setattr(costs, "_process_origins", {})
    monkeypatch.setattr(costs, "_gap_calibrations", {}, raising=False)
    monkeypatch.setattr(adaptive, "GAP_SHARE", 1e9, raising=False)  # every gap measures

    def full_calibration(*a, **k):
        raise AssertionError("gamma auto waited for a full calibration")

    monkeypatch.setattr(costs, "measure_curve", full_calibration)
    return tmp_path / "cache" / "calibration.json"


def test_the_cache_key_is_the_model_not_its_path_or_mtime(tmp_path: Path) -> None:
    a = tmp_path / "a" / "m.gguf"
    a.parent.mkdir()
    a.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    b = tmp_path / "elsewhere.gguf"
    shutil.copyfile(a, b)
    os.utime(b, (1_000_000, 1_000_000))
    key = costs.machine_key(FakeModel(a), 48)  # type: ignore[arg-type]
    assert costs.machine_key(FakeModel(b), 48) == key  # type: ignore[arg-type]
    assert costs.machine_key(FakeModel(a, n_threads=2), 48) != key  # type: ignore[arg-type]
    assert costs.machine_key(FakeModel(a, n_gpu_layers=99), 48) != key  # type: ignore[arg-type]
    other = tmp_path / "other.gguf"  # another model of the same size
    other.write_bytes(b"GGUF" + bytes(reversed(range(256))) * 64)
    assert costs.machine_key(FakeModel(other), 48) != key  # type: ignore[arg-type]


def test_first_token_comes_before_any_measurement(synthetic_models, empty_cache) -> None:
    with LlamaModel(synthetic_models["target"], n_ctx=512, n_threads=1) as target:
        plain = generate(target, PROMPT, max_tokens=40, gamma=0)
        order: list[str] = []
        real_measure = gap_calibration.GapCalibration.measure

        def measure(self, model):
            order.append("measure")
            return real_measure(self, model)

        gap_calibration.GapCalibration.measure = measure  # type: ignore[method-assign]
        try:
            events = stream_generate(
                target, PROMPT, drafter=NgramDrafter(), max_tokens=40, gamma="auto"
            )
            tokens = []
            for ev in events:
                if isinstance(ev, TokenEvent) and ev.kind.value != "rejected":
                    order.append("token")
                    tokens.append(ev.token)
        finally:
            gap_calibration.GapCalibration.measure = real_measure  # type: ignore[method-assign]
        assert order[0] == "token" and "measure" in order
        assert tokens == list(plain.tokens)  # measuring changes gamma choices only
        # the batches were rolled back: the cache holds the prompt and the output
        assert target.tokens == target.tokenize(PROMPT, add_special=True)[:] + tokens[:-1]
    assert json.loads(empty_cache.read_text())  # progress cached (provisional)


def test_measured_between_rounds_until_final_then_cached(
    synthetic_models, empty_cache, monkeypatch
) -> None:
    monkeypatch.setattr(costs, "NOISY_SPREAD", float("inf"))  # a tiny model's timings vary
    with LlamaModel(synthetic_models["target"], n_ctx=512, n_threads=1) as target:
        plain = generate(target, PROMPT, max_tokens=30, gamma=0).tokens
        curve, gaps = gap_calibration.policy_curve(target)
        assert gaps is not None and curve.timed_sizes() == (1,)  # plain rounds first
        assert costs.curve_origin(curve) == costs.ORIGIN_PENDING
        for _ in range(40):  # short replies: their progress adds up
            out = generate(target, PROMPT, drafter=NgramDrafter(), max_tokens=30, gamma="auto")
            assert out.tokens == plain
            curve, gaps = gap_calibration.policy_curve(target)
            if gaps is None:
                break
            assert costs.curve_origin(curve) == costs.ORIGIN_PROVISIONAL
        assert gaps is None and not curve.provisional, "never finished measuring"
        assert set(curve.timed_sizes()) >= set(gap_calibration.QUICK_SIZES)
        # a later process reads it from the cache: nothing left to measure
        costs._process_curves.clear()
        costs._gap_calibrations.clear()
        again, gaps = gap_calibration.policy_curve(target)
        assert gaps is None and again.seconds == curve.seconds


def test_a_noisy_gap_curve_gets_more_timings_then_is_final(
    synthetic_models, empty_cache, monkeypatch
) -> None:
    monkeypatch.setattr(costs, "NOISY_SPREAD", 0.0)  # no two timings ever agree
    with LlamaModel(synthetic_models["target"], n_ctx=512, n_threads=1) as target:
        _, gaps = gap_calibration.policy_curve(target)
        assert gaps is not None
        for _ in range(gap_calibration.GAP_REPS * len(gaps.sizes)):
            gaps.measure(target)
        assert gaps.curve is not None and gaps.curve.provisional and not gaps.done
        reps = gap_calibration.GAP_REPS
        assert all(len(v) == reps for v in gaps.samples.values())  # kept, not reset
        entry = json.loads(empty_cache.read_text())[gaps.key]
        assert entry["provisional"] is True
        costs._gap_calibrations.clear()
        used, again = gap_calibration.policy_curve(target)  # a later process uses it, and goes on
        assert again is not None and used.seconds == gaps.curve.seconds
        assert all(len(v) == reps for v in again.samples.values())
        for _ in range((gap_calibration.GAP_MAX_REPS - reps) * len(again.sizes)):
            again.measure(target)
        assert again.done and again.curve.noisy  # final, and says it was noisy
        fastest = {k: min(v) for k, v in again.samples.items()}
        assert all(len(v) == gap_calibration.GAP_MAX_REPS for v in again.samples.values())
        assert again.curve.cost(1) == fastest[1]
        entry = json.loads(empty_cache.read_text())[again.key]
        assert entry["provisional"] is False


def test_a_size_whose_timings_agree_is_not_timed_again(synthetic_models, empty_cache) -> None:
    with LlamaModel(synthetic_models["target"], n_ctx=512, n_threads=1) as target:
        _, gaps = gap_calibration.policy_curve(target)
        assert gaps is not None
        gaps.samples = {k: [] for k in gaps.sizes}
        gaps.samples[1] = [0.010, 0.011]  # agree
        gaps.samples[4] = [0.010, 0.030]  # disagree: needs another
        for k in gaps.sizes[2:]:
            gaps.samples[k] = [0.01, 0.01]
        assert gaps.next_size() == 4


def test_an_old_cache_entry_reads_as_absent(synthetic_models, empty_cache) -> None:
    empty_cache.parent.mkdir(parents=True)
    with LlamaModel(synthetic_models["target"], n_ctx=512, n_threads=1) as target:
        old = "0123456789abcdef01234567"  # a v2 key: name, size, mtime, ...
        seconds = [0.01 * k for k in range(1, 49)]
        entry = {"model": target.path.name, "key": old, "seconds": seconds, "noisy": False}
        empty_cache.write_text(json.dumps({old: entry, "junk": {"seconds": "x"}}))
        curve, gaps = gap_calibration.policy_curve(target)
        assert gaps is not None and curve.timed_sizes() == (1,)


def test_measuring_takes_a_bounded_share(synthetic_models, empty_cache, monkeypatch) -> None:
    monkeypatch.setattr(adaptive, "GAP_SHARE", 0.0)  # no time for it: a batch is priced first
    with LlamaModel(synthetic_models["target"], n_ctx=512, n_threads=1) as target:
        generate(target, PROMPT, drafter=NgramDrafter(), max_tokens=20, gamma="auto")
        _, gaps = gap_calibration.policy_curve(target)
        assert gaps is not None and gaps.measured == 0
        monkeypatch.setattr(adaptive, "GAP_SHARE", 1e6)  # all the time it wants
        generate(target, PROMPT, drafter=NgramDrafter(), max_tokens=20, gamma="auto")
        assert gaps.measured > 0


def test_the_server_session_measures_nothing_at_load_and_says_so(
    synthetic_models, empty_cache
) -> None:
    with LlamaModel(synthetic_models["target"], n_ctx=512, n_threads=1) as target:
        session = CompletionSession(target, NgramDrafter(), gamma="auto", name="t")
        assert session.calibration_note is not None and "plain" in session.calibration_note
        fixed = CompletionSession(target, NgramDrafter(), gamma=3, name="t")
        assert fixed.calibration_note is None


def test_the_chat_app_says_so_in_its_panel(synthetic_models, empty_cache) -> None:
    from edgespec_tui.session import LlamaChatEngine, ModelChoice

    path = str(synthetic_models["target"])
    with LlamaModel(synthetic_models["target"], n_ctx=512, n_threads=1) as target:
        engine = LlamaChatEngine(ModelChoice(target=path, draft="ngram"), target, NgramDrafter())
        assert engine.info.calibration is not None
        plain = LlamaChatEngine(ModelChoice(target=path), target, None)
        assert plain.info.calibration is None


def test_generate_says_what_it_does_on_stderr(synthetic_models, tmp_path: Path) -> None:
    env = dict(os.environ, EDGESPEC_CACHE_DIR=str(tmp_path / "fresh"))
    args = ["generate", "--target", str(synthetic_models["target"]), "--prompt", PROMPT]
    args += ["--max-tokens", "16", "--threads", "1", "--draft", "ngram"]
    r = subprocess.run(
        [sys.executable, "-m", "edgespec.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert "no cost curve for this model and machine yet: plain decoding first" in r.stderr
    assert "timings so far, cached" in r.stderr


def test_no_measuring_between_rounds_where_a_rollback_rebuilds_the_context(
    synthetic_models, empty_cache
) -> None:
    with LlamaModel(synthetic_models["target"], n_ctx=512, n_threads=1) as target:
        plain = generate(target, PROMPT, max_tokens=20, gamma=0).tokens
        real_truncate = target.truncate

        def rebuilding_truncate(n: int) -> None:  # as recurrent or hybrid memory does
            if n < len(target.tokens):
                target.redecodes += 1
            real_truncate(n)

        target.truncate = rebuilding_truncate  # type: ignore[method-assign]
        out = generate(target, PROMPT, drafter=NgramDrafter(), max_tokens=20, gamma="auto")
        assert out.tokens == plain
        _, gaps = gap_calibration.policy_curve(target)
        assert gaps is not None and gaps.stopped and gaps.measured == 1


def test_a_curve_another_process_finished_is_not_overwritten(synthetic_models, empty_cache) -> None:
    with LlamaModel(synthetic_models["target"], n_ctx=512, n_threads=1) as target:
        _, gaps = gap_calibration.policy_curve(target)
        assert gaps is not None
        seconds = [0.01 * k for k in range(1, gaps.max_k + 1)]
        final = costs.CostCurve(model="m", key=gaps.key, seconds=tuple(seconds))
        assert costs.store_curve(empty_cache, final)  # calibrate, in another process
        gaps.measure(target)
        assert gaps.done and gaps.curve.seconds == final.seconds
        assert json.loads(empty_cache.read_text())[gaps.key]["seconds"] == seconds
