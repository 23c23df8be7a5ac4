"""edgespec doctor (issue 53 item 4): the prompts it reads, the formula it predicts with,
the report's structure, the exactness self-test catching a broken engine, the CLI.

What holds on every CPU: the structure, exactness, the arithmetic; never a timing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import edgespec
from edgespec.bench.stats import expected_speedup
from edgespec.cli import main
from edgespec.diagnosis import predict
from edgespec.diagnosis.prompts import history_prompts, read_prompts
from edgespec.errors import InvalidParameterError

PROMPTS = [
    "one two three four five six seven eight one two three four five six seven eight one",
    "the cat sat on the mat and the dog sat on the log and the cat sat on the",
]


def write_lines(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------- the prompts file


def test_prompt_and_messages_lines_are_read_blank_lines_skipped(tmp_path: Path) -> None:
    f = write_lines(
        tmp_path / "p.jsonl",
        json.dumps({"prompt": "def f(x):", "max_tokens": 9}),
        "",
        json.dumps({"messages": [{"role": "user", "content": "hi"}], "model": "x"}),
    )
    got = read_prompts(f)
    assert [p.text for p in got] == ["def f(x):", None]
    assert got[1].messages == ({"role": "user", "content": "hi"},)
    assert got[0].name.endswith("line 1") and got[1].name.endswith("line 3")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"text": "x"}', "needs a 'prompt' string or a 'messages' list"),
        ('{"prompt": ""}', "'prompt' must be a non-empty string"),
        ('{"prompt": 3}', "'prompt' must be a non-empty string"),
        ('{"prompt": "a", "messages": []}', "not both"),
        ('{"messages": []}', "'messages' must be a non-empty list"),
        ('{"messages": [{"role": "user"}]}', "message 1 needs a 'role' string and a 'content'"),
    ],
)
def test_a_bad_line_is_one_error_naming_it(tmp_path: Path, line: str, message: str) -> None:
    f = write_lines(tmp_path / "p.jsonl", json.dumps({"prompt": "fine"}), line)
    with pytest.raises(InvalidParameterError) as e:
        read_prompts(f)
    assert f"{f} line 2: " in str(e.value) and message in str(e.value)
    assert "\n" not in str(e.value)


def test_an_empty_or_missing_file_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="no prompts in"):
        read_prompts(write_lines(tmp_path / "empty.jsonl", "", "  "))
    with pytest.raises(InvalidParameterError, match="cannot read prompts file"):
        read_prompts(tmp_path / "missing.jsonl")


def test_a_saved_history_gives_its_requests_without_their_last_tokens(tmp_path: Path) -> None:
    history = edgespec.LookupHistory(model="m.gguf")
    history.add(list(range(100, 140)))
    history.add(list(range(300, 310)))
    history.add([7, 8, 9])  # too short to be a prompt
    history.save(tmp_path / "h.json")
    got = history_prompts(tmp_path / "h.json", max_tokens=16, model="m.gguf")
    assert [p.tokens for p in got] == [tuple(range(100, 124)), (300,)]
    with pytest.raises(InvalidParameterError, match="saved for model"):
        history_prompts(tmp_path / "h.json", max_tokens=16, model="other.gguf")
    with pytest.raises(InvalidParameterError, match="not a saved lookup history"):
        history_prompts(write_lines(tmp_path / "x.json", "{}"), max_tokens=16)


# ---------------------------------------------------------------- the formula


def test_the_formula_is_leviathans_where_a_verify_costs_one_step() -> None:
    one = lambda k: 1.0  # noqa: E731  (memory-bound: any verify costs one step)
    for alpha in (0.0, 0.3, 0.8, 1.0):
        for gamma in (1, 4, 9):
            for c in (0.0, 0.1, 0.5):
                assert predict.speedup(alpha, gamma, c, one) == pytest.approx(
                    expected_speedup(alpha, gamma, c)
                )
    assert predict.expected_tokens(0.5, 2) == pytest.approx(1.75)


def test_a_verify_that_costs_more_lowers_the_prediction() -> None:
    linear = lambda k: 1.0 + 0.5 * (k - 1)  # noqa: E731
    # E(4) at 0.8 = 3.3616 tokens for 4 * 0.1 + 3.0 steps
    assert predict.speedup(0.8, 4, 0.1, linear) == pytest.approx(3.3616 / 3.4)
    s, tokens, cost = predict.speedup_of_rounds(0.8, [4, 4, 0, 0], 0.1, linear)
    assert tokens == pytest.approx((2 * 3.3616 + 2) / 4) and cost == pytest.approx(2.2)
    assert s == pytest.approx((2 * 3.3616 + 2) / 8.8)
    assert predict.speedup_of_rounds(0.8, [4] * 3, 0.1, linear)[0] == pytest.approx(
        predict.speedup(0.8, 4, 0.1, linear)
    )


def test_acceptance_by_position_generalises_the_formula() -> None:
    # every position at alpha: Leviathan's E
    for alpha in (0.0, 0.4, 0.9, 1.0):
        assert predict.expected_tokens([alpha] * 3, 5) == pytest.approx(
            predict.expected_tokens(alpha, 5)
        )
    rounds = [(4, 4), (4, 0), (2, 2), (0, 0)]
    assert predict.acceptance_by_position(rounds) == pytest.approx([2 / 3, 1.0, 1.0, 1.0])
    assert predict.acceptance_by_position([(0, 0)]) == []
    # rounds that all drafted g: E is exactly what they returned, whatever the pattern
    rng = np.random.default_rng(0)
    for _ in range(20):
        g = int(rng.integers(1, 9))
        rs = [(g, int(a)) for a in rng.integers(0, g + 1, size=30)]
        curve = predict.acceptance_by_position(rs)
        assert predict.expected_tokens(curve, g) == pytest.approx(sum(a + 1 for _, a in rs) / 30)
    # a lookup's all-or-nothing drafts: a constant alpha overpredicts, the positions do not
    lookup = [(8, 8)] * 6 + [(8, 0)] * 4
    alpha = predict.alpha_of(lookup)
    assert predict.expected_tokens(alpha, 8) > 1.15 * 5.8  # 6.67
    assert predict.expected_tokens(predict.acceptance_by_position(lookup), 8) == pytest.approx(5.8)


def test_best_gamma_only_at_timed_sizes_and_a_lookups_rounds() -> None:
    flat = lambda k: 1.0  # noqa: E731
    assert predict.best_gamma(0.9, 0.0, flat, {1, 2, 3, 5}, 10) == (4, pytest.approx(
        predict.speedup(0.9, 4, 0.0, flat)))  # fmt: skip
    gamma, pred = predict.best_gamma(0.9, 0.0, flat, {1, 2, 3, 5}, 10, proposal_rate=0.5)
    assert gamma == 4 and pred == pytest.approx(0.5 * predict.expected_tokens(0.9, 4) + 0.5)
    assert predict.alpha_of([(4, 4), (4, 1), (0, 0), (2, 0)]) == pytest.approx(5 / 7)
    assert predict.alpha_of([(0, 0)]) is None
    assert predict.regime(1.2) == "memory-bound" and predict.regime(3.5) == "compute-bound"


def test_gamma_is_chosen_on_the_envelope_and_rounds_priced_as_measured() -> None:
    from edgespec.diagnosis.timing import Run, envelope, measured_ratios

    dip = {1: 1.0, 2: 1.2, 4: 2.0, 8: 1.5, 16: 4.0}  # 8 rows timed cheaper than 4: a dip
    priced = envelope(lambda k: dip[k], dip)
    assert [priced(k) for k in (1, 2, 4, 8, 16)] == [1.0, 1.2, 2.0, 2.0, 4.0]
    plain = [Run((1,), 1, 0.1, 0.0, [(0, 0, 0.010), (0, 0, 0.012), (0, 0, 0.010)])]
    spec = [Run((1,), 1, 0.1, 0.0, [(3, 1, 0.030), (3, 3, 0.034), (1, 0, 0.015), (0, 0, 0.01)])]
    got = measured_ratios({"plain": plain, "ngram": spec})
    assert got == {2: pytest.approx(1.5), 4: pytest.approx(3.2)}


# ---------------------------------------------------------------- on the synthetic models


def _doctor(synthetic_models, **kw):
    return edgespec.doctor(
        str(synthetic_models["target"]),
        ["ngram", str(synthetic_models["draft_noisy"])],
        prompts=PROMPTS,
        max_tokens=24,
        reps=1,
        options=edgespec.LoadOptions(n_ctx=512, n_threads=1),
        **kw,
    )


def test_the_report_on_the_synthetic_models(synthetic_models) -> None:
    report = _doctor(synthetic_models)
    assert isinstance(report, edgespec.DoctorReport) and report.ok
    x = report.exactness
    assert x.passed and not x.mismatches and x.rejections > 0  # the noisy draft misses
    assert x.runs == 2 * 2 * 2 and x.tokens_compared > 0  # probe and timed runs, 2 drafters
    assert [d.label for d in report.drafters] == ["ngram", "draft_noisy"]
    noisy = report.drafters[1]
    assert 0 < noisy.alpha < 1 and noisy.draft_cost > 0 and noisy.rejections > 0
    assert noisy.predicted > 0 and noisy.measured is not None and len(noisy.measured_reps) == 1
    assert 1 <= noisy.tokens_per_round <= noisy.gamma + 1 and noisy.round_cost > 0
    assert 1 <= noisy.tokens_per_round_measured <= noisy.gamma + 1
    assert noisy.verdict and report.recommendation.reason
    assert report.recommendation.draft in ("none", "ngram", str(synthetic_models["draft_noisy"]))
    assert report.environment.backend and report.environment.threads == 1
    assert report.curve.ratios[1] == 1.0 and report.curve.regime
    assert report.reps == 1 and len(report.prompts) == 2
    data = json.loads(json.dumps(report.to_dict()))
    assert data["ok"] is True and data["drafters"][1]["label"] == "draft_noisy"
    assert "recommend" in report.text() and "exactness   passed" in report.text()


def test_a_broken_engine_fails_the_exactness_test(synthetic_models, monkeypatch, capsys) -> None:
    import edgespec.speculation.step

    def accept_everything(draft, target_argmax):
        return len(draft), int(target_argmax[len(draft)])

    monkeypatch.setattr(edgespec.speculation.step, "accept_greedy", accept_everything)
    argv = ["doctor", "--target", str(synthetic_models["target"]), "--ctx", "512"]
    argv += ["--draft", str(synthetic_models["draft_unrelated"]), "--gamma", "4"]
    argv += ["--max-tokens", "16", "--reps", "1", "--threads", "1", "--json"]
    prompts = write_lines(synthetic_models["target"].parent / "doctor-prompts.jsonl",
                          *(json.dumps({"prompt": p}) for p in PROMPTS))  # fmt: skip
    assert main([*argv, "--prompts", str(prompts)]) == 1
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["ok"] is False and report["exactness"]["mismatches"]
    assert report["recommendation"]["draft"] == "none"
    last = err.strip().splitlines()[-1]
    assert last.startswith("edgespec: error: exactness self-test failed")


def test_cli_json_and_bad_input(synthetic_models, tmp_path: Path, capsys) -> None:
    prompts = write_lines(tmp_path / "p.jsonl", *(json.dumps({"prompt": p}) for p in PROMPTS))
    argv = ["doctor", "--target", str(synthetic_models["target"]), "--ctx", "512"]
    argv += ["--threads", "1", "--max-tokens", "12", "--reps", "1", "--gamma", "2"]
    assert main([*argv, "--prompts", str(prompts), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] and [d["gamma"] for d in data["drafters"]] == [2]
    assert data["recommendation"]["draft"] in ("none", "ngram")

    bad = write_lines(tmp_path / "bad.jsonl", '{"prompt": "x"}', '{"prompt": 1}')
    assert main([*argv, "--prompts", str(bad)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"edgespec: error: {bad} line 2: 'prompt' must be a non-empty string"
    chat = write_lines(tmp_path / "chat.jsonl", '{"messages": [{"role": "user", "content": "a"}]}')
    assert main([*argv, "--prompts", str(chat)]) == 1
    assert "need a chat template" in capsys.readouterr().err
    assert main([*argv, "--prompts", str(prompts), "--draft", "ngram", "--draft", "ngram"]) == 1
    assert "given more than once" in capsys.readouterr().err


def test_cli_measures_on_a_saved_history(synthetic_models, tmp_path: Path, capsys) -> None:
    target = synthetic_models["target"]
    with edgespec.LlamaModel(target, n_ctx=256, n_threads=1) as m:
        tokens = [m.tokenize(p) for p in PROMPTS]
    history = edgespec.LookupHistory(model=target.name)
    for t in tokens:
        history.add(t + t[1:])  # a prompt and an output that repeats it
    history.save(tmp_path / "history.json")
    argv = ["doctor", "--target", str(target), "--ctx", "512", "--threads", "1"]
    argv += ["--max-tokens", "8", "--reps", "1", "--gamma", "2", "--json"]
    assert main([*argv, "--history-file", str(tmp_path / "history.json")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] and data["prompts"] == ["history.json request 1", "history.json request 2"]
    both = ["--history-file", str(tmp_path / "history.json"), "--prompts", str(tmp_path / "p")]
    assert main([*argv, *both]) == 1
    assert "not both" in capsys.readouterr().err


def test_help_names_the_options() -> None:
    from edgespec.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    text = sub.choices["doctor"].format_help()
    for option in ("--draft", "--prompts", "--history-file", "--json", "--budget-s", "--gamma"):
        assert option in text


@pytest.mark.real_model
def test_gemma_with_ngram_is_exact_and_explained(real_model_paths) -> None:
    report = edgespec.doctor(
        str(real_model_paths["gemma-3-270m"]),
        ["ngram"],
        prompts=["def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci("],
        max_tokens=16,
        reps=1,
        options=edgespec.LoadOptions(n_ctx=512),
    )
    assert report.ok and report.exactness.tokens_compared > 0
    assert report.curve.ratio_8 > 0 and report.drafters[0].verdict
