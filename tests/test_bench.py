"""edgespec bench: statistics and projection, llama.cpp output parsing, workloads, CLI end to end.

The end-to-end tests run on the synthetic models and a fake llama.cpp binary;
nothing here asserts on timings.
"""

from __future__ import annotations

import json
import math
import os
import random
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from edgespec.backend import VocabInfo
from edgespec.bench import llamacpp
from edgespec.bench.chart import chart_series
from edgespec.bench.report import build_report, finish, goals_table, summary_table, text_report
from edgespec.bench.runner import CEILING_SIZES, BenchSetup, check_setup, render_workload
from edgespec.bench.stats import (
    RunRecord,
    ceiling_at,
    check_goals,
    expected_speedup,
    histogram,
    median_ratio,
    rounds_projection,
    summarise,
    verify_ceiling,
)
from edgespec.bench.workloads import Workload, builtin_workloads, parse_workload, select_workloads
from edgespec.chat_template import CHATML
from edgespec.cli import main
from edgespec.errors import InvalidParameterError

# captured from llama-lookup (llama-cpp-python 0.3.36's vendored llama.cpp), trimmed
LOOKUP_SAMPLE = """\
0.01.877.682 W llama_kv_cache_iswa: using full-size SWA cache
0.01.897.203 I cmn          init: llama threadpool init, n_threads = 2


<bos>The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the

0.08.342.913 I encoded   15 tokens in    0.642 seconds, speed:   76.358 t/s
0.08.342.914 I decoded   34 tokens in    3.678 seconds, speed:    9.245 t/s
0.08.342.914 I \n0.08.342.914 I n_draft      = 4
0.08.342.915 I n_predict    = 34
0.08.342.915 I n_drafted    = 28
0.08.342.915 I t_draft_flat = 0.03 ms
0.08.342.916 I t_draft      = 0.13 ms, 4.79 us per token, 208955.22 tokens per second
0.08.342.916 I n_accept     = 24
0.08.342.917 I accept       = 85.714%
0.08.342.917 I \ntarget:

0.08.342.929 I common_perf_print:        load time =    2705.65 ms
"""

# captured from llama-speculative-simple, trimmed
SPECULATIVE_SAMPLE = """\
<s> the cat sat on the mat and then

0.01.350.108 I encoded   11 tokens in    0.023 seconds, speed:  486.381 t/s
0.01.350.109 I decoded   19 tokens in    0.041 seconds, speed:  465.641 t/s
0.01.350.109 I \n0.01.350.110 I n_draft   = 4
0.05.492.492 I n_predict = 19
0.05.492.518 I n_drafted = 21
0.05.492.543 I n_accept  = 13
0.05.492.569 I accept    = 61.905%
"""

TINY_WORKLOAD = """\
name = "tiny"
description = "a repetitive prompt"
temperature = 0.0
max_tokens = 12
prompt = "the cat sat on the mat and the cat sat on the"
"""


# ------------------------------------------------------------------ statistics


def test_expected_speedup_matches_the_paper() -> None:
    # Leviathan et al.: (1 - a^(g+1)) / ((1 - a)(g c + 1))
    assert expected_speedup(0.8, 4, 0.0) == pytest.approx((1 - 0.8**5) / 0.2)
    assert expected_speedup(0.8, 4, 0.1) == pytest.approx((1 - 0.8**5) / 0.2 / 1.4)
    assert expected_speedup(0.0, 4, 0.0) == pytest.approx(1.0)  # nothing accepted, free draft
    assert expected_speedup(0.0, 4, 0.5) == pytest.approx(1 / 3)  # nothing accepted, paid for
    assert expected_speedup(1.0, 7, 0.0) == pytest.approx(8.0)  # the a -> 1 limit
    assert expected_speedup(1.0 - 1e-12, 7, 0.0) == pytest.approx(8.0, rel=1e-6)
    assert expected_speedup(0.6, 0, 0.3) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        expected_speedup(1.5, 2, 0.0)


def test_rounds_projection() -> None:
    assert rounds_projection(3.0, 4.0, 0.0) == pytest.approx(3.0)
    assert rounds_projection(3.0, 4.0, 0.25) == pytest.approx(1.5)
    assert rounds_projection(0.0, 4.0, 0.25) == 0.0


def test_verify_ceiling() -> None:
    # a 10-token verify at 5x one token: 2x at best, however good the drafter
    k, best = verify_ceiling([0.02, 0.046, 0.054, 0.06, 0.08] + [0.1] * 5 + [0.11, 0.12])
    assert (k, best) == (10, pytest.approx(2.0))
    assert verify_ceiling([0.01] * 4) == (4, pytest.approx(4.0))  # free batches
    assert verify_ceiling([]) == (1, 1.0)
    # the same bound from a few timed sizes (deep in a context, where rows cost more)
    assert ceiling_at({1: 0.02, 16: 0.2, 48: 0.5}) == (48, pytest.approx(1.92))
    assert ceiling_at({1: 0.02, 16: 0.4}) == (1, pytest.approx(1.0))
    assert ceiling_at({1: 0.02, 8: 0.0}) == (1, pytest.approx(1.0))  # a 0 s timing: none


def test_paired_ratios_skip_failed_reps() -> None:
    assert median_ratio([2.0, 3.0, 8.0], [1.0, 1.0, 2.0]) == pytest.approx(3.0)
    assert median_ratio([2.0, None, 9.0], [1.0, 1.0, 3.0]) == pytest.approx(2.5)
    assert median_ratio([2.0], [None]) is None  # no data, not a 0.00x slow-down


def test_histogram() -> None:
    assert histogram([0, 2, 2, 5]) == [1, 0, 2, 0, 0, 1]
    assert histogram([0, 9], max_len=3) == [1, 0, 0, 1]
    assert histogram([]) == [0]


def test_summarise_medians_and_projection() -> None:
    plain = [RunRecord(10.0, generated=20, rounds=20, target_calls=20), RunRecord(20.0), None]
    spec = [
        RunRecord(
            15.0,
            generated=20,
            drafted=16,
            accepted=12,
            rounds=8,
            target_calls=8,
            accepted_lengths=[4, 4, 0, 4],
        ),  # fmt: skip
        RunRecord(50.0, generated=20, drafted=16, accepted=12, rounds=8, target_calls=8),
        RunRecord(99.0),
    ]
    s = summarise(spec, plain, 0.0)
    assert s["reps"] == 3
    assert s["speedup"] == pytest.approx(2.0)  # median of 1.5 and 2.5; rep 3 has no plain
    assert s["accepted_hist"] == [1, 0, 0, 0, 3]
    assert s["projection"]["cost_ratio"] == 0.0
    assert "projection" in s["projection"]["label"]
    assert summarise(plain, plain, None)["speedup"] == pytest.approx(1.0)
    assert "projection" not in summarise(plain, plain, None)


def test_goals() -> None:
    workloads = {
        "creative_writing": {
            "auto": {"ngram": {"speedup": 0.98, "vs_best_fixed": 0.9, "best_fixed_gamma": 2}}
        },  # fmt: skip
        "code_editing": {
            "auto": {"ngram": {"speedup": 2.4, "vs_best_fixed": 1.0, "best_fixed_gamma": 8}},
            "vs_llama_lookup": 1.1,
            "llama_lookup_best": 8,
        },
    }
    goals = {g["goal"]: g["met"] for g in check_goals(workloads)}
    assert goals["never loses: creative_writing, ngram auto vs plain"] is True
    assert goals["near best fixed gamma: creative_writing, ngram auto vs gamma 2"] is False
    assert goals["code editing: ngram auto vs plain"] is True
    assert goals["code editing: ngram auto vs llama-lookup (draft 8)"] is False


def _mini_report(
    records: dict[str, list[RunRecord | None]], configs: dict[str, tuple[str, str | None, object]]
) -> dict:
    """build_report on the workload "tiny" from hand-made records; configs maps each
    label to (kind, drafter, gamma)."""
    info = {
        "target": "t.gguf", "threads": 1,
        "drafters": {"ngram": {"model": None, "cost_ratio": 0.0}},
        "configs": [
            {"label": label, "kind": kind, "drafter": drafter, "gamma": gamma}
            for label, (kind, drafter, gamma) in configs.items()
        ],
    }  # fmt: skip
    return build_report({"tiny": records}, info, [parse_workload(TINY_WORKLOAD)], {"reps": 3})


def _recs(*tps: float) -> list[RunRecord | None]:
    return [RunRecord(t) for t in tps]


def test_best_configs_are_chosen_by_paired_speedup() -> None:
    # plain's fast third rep: g=2 and lookup n=2 have the highest median tok/s (31) but
    # paired speed-ups of 0.90x; g=4 and n=4 (30 tok/s) have 3.00x
    e, lookup = "edgespec", llamacpp.LOOKUP
    report = _mini_report(
        {
            "plain": _recs(10, 10, 40), "ngram auto": _recs(28, 28, 30),
            "ngram g=2": _recs(9, 31, 31), "ngram g=4": _recs(30, 30, 30),
            "llama-lookup n=2": _recs(9, 31, 31), "llama-lookup n=4": _recs(30, 30, 30),
        },
        {
            "plain": (e, None, 0), "ngram auto": (e, "ngram", "auto"),
            "ngram g=2": (e, "ngram", 2), "ngram g=4": (e, "ngram", 4),
            "llama-lookup n=2": (lookup, None, 2), "llama-lookup n=4": (lookup, None, 4),
        },
    )  # fmt: skip
    w = report["workloads"]["tiny"]
    auto = w["auto"]["ngram"]
    assert auto["best_fixed_gamma"] == 4 and auto["best_fixed_speedup"] == pytest.approx(3.0)
    assert auto["vs_best_fixed"] == pytest.approx(28 / 30)
    assert w["llama_lookup_best"] == 4 and w["vs_llama_lookup"] == pytest.approx(28 / 30)
    goals = {g["goal"]: g["met"] for g in report["goals"]}
    assert goals["near best fixed gamma: tiny, ngram auto vs gamma 4"] is False
    assert "| 3.00x (4) |" in summary_table(report)
    series = chart_series(report)
    assert series["ngram best fixed"]["tiny"] == pytest.approx(3.0)
    assert series["llama-lookup best"]["tiny"] == pytest.approx(3.0)


def test_no_paired_data_is_no_data_not_a_slowdown() -> None:
    e = "edgespec"
    report = _mini_report(
        {"plain": [None, None], "ngram auto": _recs(12, 13), "ngram g=2": _recs(11, 12)},
        {"plain": (e, None, 0), "ngram auto": (e, "ngram", "auto"), "ngram g=2": (e, "ngram", 2)},
    )
    w = report["workloads"]["tiny"]
    assert w["auto"]["ngram"]["speedup"] is None and "best_fixed_gamma" not in w["auto"]["ngram"]
    assert report["goals"] == []  # nothing to judge, rather than 0.00x: **no**
    row = summary_table(report).splitlines()[-1]
    assert "0.00x" not in row and row.endswith("| - | - | - | - | - |")
    missing = {"w": {"auto": {"ngram": {"speedup": None, "vs_best_fixed": None}},
                     "vs_llama_lookup": None}}  # fmt: skip
    assert check_goals({"code_editing": missing["w"]}) == []


def test_projection_uses_the_per_token_acceptance() -> None:
    # every round drafts 4 and accepts 4, 0, 1, 2, 4: 11 accepted, 3 rounds rejected one
    rec = RunRecord(20.0, generated=16, drafted=20, accepted=11, rounds=5, target_calls=5,
                    accepted_lengths=[4, 0, 1, 2, 4], drafted_lengths=[4] * 5)  # fmt: skip
    assert rec.alpha == pytest.approx(11 / 14) and rec.acceptance_rate == pytest.approx(11 / 20)
    proj = summarise([rec], [RunRecord(10.0)], 0.0)["projection"]
    assert proj["alpha"] == pytest.approx(11 / 14)
    assert proj["formula"] == pytest.approx(expected_speedup(11 / 14, 4, 0.0))
    # simulated rounds with alpha 0.8: the formula matches the tokens per call they made
    rng, lengths = random.Random(0), []
    for _ in range(20000):
        n = 0
        while n < 4 and rng.random() < 0.8:
            n += 1
        lengths.append(n)
    sim = RunRecord(50.0, generated=sum(lengths) + 20000, drafted=80000, accepted=sum(lengths),
                    rounds=20000, target_calls=20000, accepted_lengths=lengths,
                    drafted_lengths=[4] * 20000)  # fmt: skip
    s = summarise([sim], [RunRecord(10.0)], 0.0)
    assert s["projection"]["formula"] == pytest.approx(s["mean_accepted_per_call"], rel=0.01)
    assert s["projection"]["formula"] == pytest.approx(expected_speedup(0.8, 4, 0.0), rel=0.01)
    # every draft accepted: alpha 1, the finite limit g + 1
    full = RunRecord(9.0, drafted=8, accepted=8, rounds=2, accepted_lengths=[4, 4],
                     drafted_lengths=[4, 4])  # fmt: skip
    assert summarise([full], [RunRecord(3.0)], 0.0)["projection"]["formula"] == pytest.approx(5.0)
    # without per-round counts (and in a report saved before them): no formula figure
    bare = RunRecord(9.0, drafted=8, accepted=4, rounds=2, target_calls=2)
    assert summarise([bare], [RunRecord(3.0)], 0.0)["projection"]["formula"] is None
    old = {"drafters": {}, "workloads": {"w": {"configs": {"ngram g=4": {"kind": "edgespec",
           "projection": {"formula": 2.27, "rounds": 3.4}}}}}}  # fmt: skip
    old_proj = finish(old)["workloads"]["w"]["configs"]["ngram g=4"]["projection"]
    assert old_proj == {"formula": None, "rounds": 3.4}


def _flagged_report(
    plain: list[float], auto: list[float], *, depth_ceiling: float | None = None
) -> dict:
    """build_report on "tiny" with plain, ngram auto and ngram g=2 (auto's figures) and,
    optionally, a ceiling timed at the workload's depth."""
    e = "edgespec"
    info = {
        "target": "t.gguf", "threads": 1,
        "drafters": {"ngram": {"model": None, "cost_ratio": 0.0}},
        "configs": [
            {"label": "plain", "kind": e, "drafter": None, "gamma": 0},
            {"label": "ngram auto", "kind": e, "drafter": "ngram", "gamma": "auto"},
            {"label": "ngram g=2", "kind": e, "drafter": "ngram", "gamma": 2},
        ],
    }  # fmt: skip
    if depth_ceiling is not None:
        info["depth_ceilings"] = {"tiny": {"depth": 40, "batch": 8, "speedup": depth_ceiling}}
    records = {"plain": _recs(*plain), "ngram auto": _recs(*auto), "ngram g=2": _recs(*auto)}
    meta = {"reps": len(plain)}
    return build_report({"tiny": records}, info, [parse_workload(TINY_WORKLOAD)], meta)


def test_one_repetition_judges_no_goal() -> None:
    """bench --quick's one repetition printed "met: yes": one run has no spread to see."""
    report = _flagged_report([10.0], [20.0])
    assert report["goals"] and all(g["met"] is None for g in report["goals"])
    assert all("1 repetition" in g["not_judged"] for g in report["goals"])
    text = text_report(report)
    assert "| yes |" not in text and "not judged (1 repetition" in text
    assert "one repetition" in text and "no goal is judged" in text
    # two repetitions are judged
    assert all(g["met"] is True for g in _flagged_report([10, 10], [20, 20])["goals"])


def test_a_speedup_above_the_ceiling_is_flagged_not_credited() -> None:
    """3.96x next to a ceiling of 2.63x: noise, not a speed-up."""
    report = _flagged_report([10, 10, 10], [39.6, 39.6, 39.6], depth_ceiling=2.63)
    w = report["workloads"]["tiny"]
    assert w["configs"]["ngram auto"]["over_ceiling"] is True
    assert w["configs"]["plain"]["over_ceiling"] is False
    assert any("3.96x is above the measured ceiling of 2.63x" in f for f in w["flags"])
    never = next(g for g in report["goals"] if g["goal"].startswith("never loses"))
    assert never["met"] is None and "ceiling" in never["not_judged"]
    assert "| 3.96x ! |" in summary_table(report)
    assert "- tiny: ngram auto: 3.96x is above" in text_report(report)
    # under the ceiling: no flag, judged
    quiet = _flagged_report([10, 10, 10], [20, 20, 20], depth_ceiling=2.63)
    assert quiet["workloads"]["tiny"]["flags"] == []
    assert all(g["met"] is not None for g in quiet["goals"])
    assert "Warnings" not in text_report(quiet)
    # llama.cpp's own kernels are not bound by edgespec's cost curve: not flagged
    lookup = {"kind": llamacpp.LOOKUP, "speedup": 4.0, "reps": 3, "drafter": None, "gamma": 4,
              "tokens_per_second": 40.0, "tokens_per_second_all": [40.0] * 3}  # fmt: skip
    w["configs"]["llama-lookup n=4"] = lookup
    finish(report)
    assert lookup["over_ceiling"] is False


def test_the_larger_ceiling_bounds_the_speedups() -> None:
    """Either ceiling is a bound; the larger one (here the calibrated curve's 4x) is the
    one a real speed-up stays under, so 3x at a depth ceiling of 2.5x is not flagged."""
    report = _flagged_report([10, 10, 10], [30, 30, 30], depth_ceiling=2.5)
    report["calibration"] = {"target": [0.01, 0.005, 0.0075, 0.01]}  # 4 tokens: 4x
    finish(report)
    assert report["verify_ceiling"]["speedup"] == pytest.approx(4.0)
    assert report["workloads"]["tiny"]["configs"]["ngram auto"]["over_ceiling"] is False


def test_plain_that_varies_across_repetitions_is_flagged() -> None:
    report = _flagged_report([10, 13, 10], [20, 20, 20])
    w = report["workloads"]["tiny"]
    assert w["plain_spread"] == pytest.approx(0.3)
    assert any("plain tok/s varied 30% across repetitions" in f for f in w["flags"])
    assert "varied 30%" in text_report(report)
    steady = _flagged_report([10, 10.5, 10], [20, 20, 20])["workloads"]["tiny"]
    assert steady["plain_spread"] == pytest.approx(0.05) and steady["flags"] == []


def test_goals_table_never_prints_a_miss_as_the_threshold() -> None:
    def row(value: float) -> str:
        goal = {"goal": "g", "value": value, "threshold": 0.97, "met": value >= 0.97}
        return goals_table({"goals": [goal]}).splitlines()[-1]

    assert row(0.9696) == "| g | 0.9696x | 0.97x | **no** |"
    assert row(0.9649) == "| g | 0.96x | 0.97x | **no** |"
    assert row(0.97) == "| g | 0.97x | 0.97x | yes |"
    assert row(0.9749) == "| g | 0.97x | 0.97x | yes |"
    assert row(0.97 - 1e-9) == "| g | <0.97x | 0.97x | **no** |"


# ------------------------------------------------------------------ llama.cpp


def test_parse_lookup_output() -> None:
    r = llamacpp.parse_output(LOOKUP_SAMPLE)
    assert (r.decoded, r.decode_s, r.tokens_per_second) == (34, 3.678, 9.245)
    assert (r.n_draft, r.n_drafted, r.n_accept) == (4, 28, 24)
    rec = r.to_record(321.0)
    assert rec.acceptance_rate == pytest.approx(24 / 28)
    assert rec.peak_rss_mib == 321.0


def test_parse_speculative_output() -> None:
    r = llamacpp.parse_output(SPECULATIVE_SAMPLE)
    assert (r.decoded, r.tokens_per_second, r.n_drafted, r.n_accept) == (19, 465.641, 21, 13)


def test_parse_output_without_summary() -> None:
    with pytest.raises(llamacpp.LlamaCppError, match="no 'decoded"):
        llamacpp.parse_output("init: llama threadpool init, n_threads = 2\n")


def test_parse_output_reads_the_summary_only() -> None:
    echoed = "the story: n_drafted = 7 and n_accept = 5\n"  # generated text, before it
    decoded = LOOKUP_SAMPLE.index("t/s", LOOKUP_SAMPLE.index("I decoded")) + len("t/s\n")
    with pytest.raises(llamacpp.LlamaCppError, match="no n_drafted or n_accept after"):
        llamacpp.parse_output(echoed + LOOKUP_SAMPLE[:decoded])  # the summary was lost
    r = llamacpp.parse_output(echoed + LOOKUP_SAMPLE)
    assert (r.n_drafted, r.n_accept) == (28, 24)


def test_run_refuses_a_binary_that_cannot_run(tmp_path: Path) -> None:
    junk = tmp_path / "llama-lookup"
    junk.write_bytes(b"\x7fELF, but for another machine")
    junk.chmod(0o755)
    with pytest.raises(llamacpp.LlamaCppError, match="cannot run .*llama-lookup: Exec format"):
        llamacpp.run([str(junk)])
    not_executable = _fake_binary(tmp_path, "llama-speculative-simple", "exit 0\n")
    not_executable.chmod(0o644)
    with pytest.raises(llamacpp.LlamaCppError, match="cannot run .*: Permission denied"):
        llamacpp.run([str(not_executable)])


def test_command_uses_the_workload_verbatim() -> None:
    w = parse_workload(TINY_WORKLOAD)
    cmd = llamacpp.command(
        Path("/b/llama-lookup"), target=Path("t.gguf"), workload=w, max_tokens=12, threads=2,
        n_ctx=512, n_draft=8, seed=1,
    )  # fmt: skip
    assert cmd[cmd.index("-p") + 1] == w.prompt  # -f would drop a trailing newline
    assert cmd[cmd.index("--spec-draft-n-max") + 1] == "8"
    assert cmd[cmd.index("-t") + 1] == "2" and "--swa-full" not in cmd and "-md" not in cmd
    spec = llamacpp.command(
        Path("/b/llama-speculative-simple"), target=Path("t.gguf"), workload=w, max_tokens=12,
        threads=2, n_ctx=512, n_draft=4, seed=1, draft=Path("d.gguf"),
    )  # fmt: skip
    assert spec[spec.index("-md") + 1] == "d.gguf"
    full = llamacpp.command(
        Path("/b/llama-lookup"), target=Path("t.gguf"), workload=w, max_tokens=12, threads=2,
        n_ctx=512, n_draft=8, seed=1, swa_full=True,
    )  # fmt: skip
    assert full[-1] == "--swa-full" and full[:-1] == cmd
    amx = llamacpp.command(
        Path("/b/llama-lookup"), target=Path("t.gguf"), workload=w, max_tokens=12, threads=2,
        n_ctx=512, n_draft=8, seed=1, no_repack=True,
    )  # fmt: skip
    assert amx[-1] == "--no-repack" and amx[:-1] == cmd
    assert spec[spec.index("--spec-type") + 1] == "draft-simple"


def _fake_binary(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_run_retries_a_lost_summary(tmp_path: Path) -> None:
    # llama.cpp's log thread can lose the summary on a busy machine: the run is repeated
    sample = tmp_path / "sample.txt"
    sample.write_text(LOOKUP_SAMPLE)
    counter = tmp_path / "count"
    fake = _fake_binary(
        tmp_path, "llama-lookup",
        f'echo x >> "{counter}"\n'
        f'if [ "$(wc -l < "{counter}")" -ge 2 ]; then cat "{sample}"; fi\n',
    )  # fmt: skip
    result, rss = llamacpp.run([str(fake)])
    assert result.tokens_per_second == 9.245 and rss > 0
    assert len(counter.read_text().splitlines()) == 2
    failing = _fake_binary(tmp_path, "llama-speculative-simple", "echo oops >&2\nexit 3\n")
    with pytest.raises(llamacpp.LlamaCppError, match="exited with 3"):
        llamacpp.run([str(failing)])


# ------------------------------------------------------------------ workloads


def test_builtin_workloads() -> None:
    shipped = builtin_workloads()
    assert set(shipped) >= {
        "chat", "code_completion", "code_editing", "summarisation", "creative_writing"
    }  # fmt: skip
    assert shipped["creative_writing"].temperature == 1.0
    edit = shipped["code_editing"]
    assert edit.greedy and not edit.chat
    source = edit.prompt.split("```python\n")[1].split("```")[0]
    assert 2000 < len(source) < 3200  # a ~2.5 kB file to copy
    begun = edit.prompt.rsplit("```python\n", 1)[1]
    assert begun and source.startswith(begun)  # the rewritten copy has begun


def test_select_workloads(tmp_path: Path) -> None:
    f = tmp_path / "mine.toml"
    f.write_text(TINY_WORKLOAD)
    picked = select_workloads(f"chat,{f}")
    assert [w.name for w in picked] == ["chat", "tiny"]
    assert len(select_workloads(None)) == len(builtin_workloads())
    with pytest.raises(InvalidParameterError, match="unknown workload"):
        select_workloads("nope")
    with pytest.raises(InvalidParameterError, match="needs a name and a prompt"):
        parse_workload('name = "x"\n')
    with pytest.raises(InvalidParameterError, match="workload named more than once: chat"):
        select_workloads("chat,code_editing,chat")
    renamed = tmp_path / "other.toml"
    renamed.write_text(TINY_WORKLOAD.replace('"tiny"', '"chat"'))
    with pytest.raises(InvalidParameterError, match="more than once: chat"):
        select_workloads(f"chat,{renamed}")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("max_tokens = 0", "max_tokens must be a whole number >= 1"),
        ("max_tokens = -3", "max_tokens must be"),
        ("max_tokens = 2.5", "max_tokens must be"),
        ('max_tokens = "12"', "max_tokens must be"),
        ("max_tokens = true", "max_tokens must be"),
        ("temperature = -0.5", "temperature must be a number >= 0"),
        ("temperature = nan", "temperature must be"),
        ("temperature = inf", "temperature must be"),
        ('temperature = "0.7"', "temperature must be"),
        ('chat = "false"', "chat must be true or false, got 'false'"),
        ("chat = 1", "chat must be true or false"),
    ],
)
def test_parse_workload_refuses_bad_fields(line: str, message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message):
        parse_workload(f'name = "x"\nprompt = "p"\n{line}\n')


def test_parse_workload_fields() -> None:
    w = parse_workload('name = "x"\nprompt = "p"\nchat = true\ntemperature = 1\nmax_tokens = 1\n')
    assert (w.chat, w.temperature, w.max_tokens) == (True, 1.0, 1)
    assert parse_workload('name = "x"\nprompt = "p"\n').chat is False


class _TemplateOnly:
    """A stand-in target with a chat template and a BOS token ``<s>`` its tokenizer adds."""

    def __init__(self, template: str | None) -> None:
        self.template = template

    def chat_template(self) -> str | None:
        return self.template

    def vocab_info(self) -> VocabInfo:
        return VocabInfo(vocab_type=1, n_vocab=3, add_bos=True, bos=1, add_eos=False, eos=2)

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        return {1: b"<s>", 2: b"</s>"}[token]


CHAT_WORKLOAD = TINY_WORKLOAD.replace('"tiny"', '"talk"') + "chat = true\n"


def test_render_workload_uses_the_chat_template_renderer() -> None:
    w = parse_workload(CHAT_WORKLOAD)
    dated = render_workload(_TemplateOnly("{{ strftime_now('%Y') }}|{{ messages[0].content }}"), w)
    assert dated.prompt == f"{time.strftime('%Y')}|{w.prompt}" and not dated.chat
    # the one BOS rule: the tokenizer adds BOS, so the template's leading BOS text goes
    bos_first = _TemplateOnly("{{ bos_token }}{{ messages[0].content }}{{ eos_token }}")
    assert render_workload(bos_first, w).prompt == f"{w.prompt}</s>"
    assert render_workload(_TemplateOnly(None), w).prompt == w.prompt  # no template: as is
    plain = parse_workload(TINY_WORKLOAD)
    assert render_workload(_TemplateOnly(CHATML), plain) is plain
    with pytest.raises(InvalidParameterError, match="refused the conversation: wants a system"):
        render_workload(_TemplateOnly("{{ raise_exception('wants a system turn') }}"), w)
    with pytest.raises(InvalidParameterError, match="does not parse"):
        render_workload(_TemplateOnly("{% for %}"), w)


def test_bench_refuses_a_failing_chat_template_before_timing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import edgespec.bench.runner as runner

    def must_not_run(*_a: object, **_k: object) -> None:
        raise AssertionError("a drafter was loaded or something timed")

    bad = _TemplateOnly("{{ raise_exception('wants a system turn') }}")
    monkeypatch.setattr(runner, "load_pair", lambda *_a, **_k: (bad, None))
    monkeypatch.setattr(runner.LoadedDrafter, "load", must_not_run)
    monkeypatch.setattr(runner, "_warm_up", must_not_run)
    setup = BenchSetup(target="t", drafters=["ngram"], workloads=[parse_workload(CHAT_WORKLOAD)],
                       gammas=["auto"])  # fmt: skip
    with pytest.raises(InvalidParameterError, match="wants a system turn"):
        runner.run_bench(setup)


# ------------------------------------------------------------------ end to end


def test_bench_cli_writes_json_and_png(
    synthetic_models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny = tmp_path / "tiny.toml"
    tiny.write_text(TINY_WORKLOAD)
    bins = tmp_path / "bin"
    bins.mkdir()
    sample = tmp_path / "sample.txt"
    sample.write_text(LOOKUP_SAMPLE)
    _fake_binary(bins, "llama-lookup", f'cat "{sample}"\n')
    out, png = tmp_path / "out.json", tmp_path / "out.png"
    rc = main(
        [
            "bench", "--target", str(synthetic_models["target"]),
            "--drafters", f"ngram,{synthetic_models['draft_noisy']}",
            "--workloads", f"{tiny},creative_writing", "--reps", "2", "--max-tokens", "16",
            "--gammas", "auto,2", "--llama-cpp-bin", str(bins), "--llama-draft-lengths", "2,4",
            "--json", str(out), "--chart", str(png),
        ]
    )  # fmt: skip
    assert rc == 0
    report = json.loads(out.read_text())
    assert set(report["workloads"]) == {"tiny", "creative_writing"}
    assert set(report["drafters"]) == {"ngram", "draft_noisy"}
    assert report["drafters"]["ngram"]["cost_ratio"] == 0.0
    assert report["drafters"]["draft_noisy"]["cost_ratio"] == pytest.approx(1.0)
    rows = report["workloads"]["tiny"]["configs"]
    assert set(rows) == {
        "plain", "ngram auto", "ngram g=2", "draft_noisy auto", "draft_noisy g=2",
        "llama-lookup n=2", "llama-lookup n=4",
    }  # fmt: skip
    for label, r in rows.items():
        assert r["reps"] == 2, label
        assert len(r["tokens_per_second_all"]) == 2
        assert r["tokens_per_second"] > 0 and math.isfinite(r["tokens_per_second"])
        assert r["peak_rss_mib"] > 0
    assert rows["plain"]["speedup"] == pytest.approx(1.0)
    assert rows["draft_noisy g=2"]["gamma_mean"] > 0
    assert sum(rows["draft_noisy g=2"]["accepted_hist"]) > 0
    assert rows["llama-lookup n=2"]["acceptance_rate"] == pytest.approx(24 / 28)
    assert "projection" in rows["ngram auto"] and "projection" not in rows["llama-lookup n=2"]
    assert report["verify_ceiling"]["speedup"] >= 1.0
    for wname, w in report["workloads"].items():
        ceiling = w["depth_ceiling"]  # timed at the prompt plus half the new tokens
        assert ceiling["depth"] == w["prompt_tokens"] + w["max_tokens"] // 2, wname
        assert ceiling["speedup"] >= 1.0 and ceiling["batch"] in CEILING_SIZES
    tiny_w = report["workloads"]["tiny"]
    assert tiny_w["auto"]["ngram"]["best_fixed_gamma"] == 2
    assert tiny_w["llama_lookup_best"] in (2, 4) and tiny_w["vs_llama_lookup"] > 0
    assert any(g["goal"].startswith("never loses") for g in report["goals"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = capsys.readouterr().out
    assert "| tiny |" in text and "projection, not a measurement" in text


def test_bench_chat_workload_is_rendered_for_every_run(
    synthetic_models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import edgespec.bench.runner as runner
    from edgespec.backend import LlamaModel

    talk = tmp_path / "talk.toml"
    talk.write_text(CHAT_WORKLOAD)
    bins, argv_file, sample = tmp_path / "bin", tmp_path / "argv", tmp_path / "sample.txt"
    bins.mkdir()
    sample.write_text(LOOKUP_SAMPLE)
    record_argv = f'for a in "$@"; do printf "%s\\0" "$a"; done > "{argv_file}"\n'
    _fake_binary(bins, "llama-lookup", record_argv + f'cat "{sample}"\n')
    prompts: list[object] = []
    real = runner.stream_generate

    def spy(target: object, prompt: object, **kw: object) -> object:
        prompts.append(prompt)
        return real(target, prompt, **kw)

    monkeypatch.setattr(runner, "stream_generate", spy)
    out = tmp_path / "out.json"
    target = synthetic_models["target_fim"]  # the synthetic model with a (ChatML) template
    rc = main(
        [
            "bench", "--target", str(target), "--drafters", "ngram", "--workloads", str(talk),
            "--reps", "1", "--max-tokens", "8", "--gammas", "auto,2", "--llama-cpp-bin",
            str(bins), "--llama-draft-lengths", "2", "--json", str(out),
        ]
    )  # fmt: skip
    assert rc == 0
    raw = parse_workload(CHAT_WORKLOAD).prompt
    chat = f"<|im_start|>user\n{raw}<|im_end|>\n<|im_start|>assistant\n"
    assert prompts == [chat] * 3  # plain, ngram auto, ngram g=2
    argv = argv_file.read_bytes().split(b"\0")
    assert argv[argv.index(b"-p") + 1].decode() == chat
    model = LlamaModel(target, n_ctx=512, n_threads=1)
    tokens = len(model.tokenize(chat, add_special=True, parse_special=True))
    w = json.loads(out.read_text())["workloads"]["talk"]
    assert w["prompt_tokens"] == tokens and w["depth_ceiling"]["depth"] == tokens + 4
    model.close()


def test_short_drafter_names() -> None:
    from edgespec.bench.runner import short_name

    assert short_name("ngram") == "ngram"
    assert short_name("/m/draft.gguf") == "draft"
    assert short_name("ngram+/m/draft.gguf") == "ngram+draft"
    assert short_name("qwen2.5-coder-0.5b-instruct") == "qwen2.5-coder-0.5b-instruct"


def _saved_report() -> dict:
    records = {
        "tiny": {
            "plain": [RunRecord(10.0, generated=8, rounds=8, target_calls=8)],
            "ngram auto": [
                RunRecord(
                    12.0,
                    generated=8,
                    drafted=6,
                    accepted=4,
                    rounds=4,
                    target_calls=4,
                    accepted_lengths=[2, 2, 0, 0],
                )
            ],  # fmt: skip
        }
    }
    info = {
        "target": "t.gguf", "target_size_bytes": 1, "threads": 2, "drafters": {
            "ngram": {"model": None, "cost_ratio": 0.0}},
        "configs": [
            {"label": "plain", "kind": "edgespec", "drafter": None, "gamma": 0},
            {"label": "ngram auto", "kind": "edgespec", "drafter": "ngram", "gamma": "auto"},
        ],
    }  # fmt: skip
    return build_report(records, info, [parse_workload(TINY_WORKLOAD)], {"reps": 1})


def test_bench_rerenders_from_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = _saved_report()
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(report))
    png = tmp_path / "r.png"
    assert main(["bench", "--from-json", str(saved), "--chart", str(png)]) == 0
    assert png.stat().st_size > 0
    out = capsys.readouterr().out
    assert "1.20x" in out and out.strip() == text_report(report).strip()


@pytest.mark.parametrize(
    "breakage",
    [
        lambda r: r["workloads"]["tiny"].pop("temperature"),  # KeyError in the tables
        lambda r: r["workloads"]["tiny"].update(depth_ceiling={"depth": 5}),  # ... their end
        lambda r: r["workloads"]["tiny"]["configs"]["ngram auto"].pop("speedup"),
        lambda r: r.update(calibration={"target": [0.01, "x"]}),  # TypeError in finish
        lambda r: r.update(workloads=[]),  # AttributeError
        lambda r: r["workloads"]["tiny"]["configs"]["ngram auto"].update(accepted_hist=["x"]),
    ],
)
def test_bench_rerender_refuses_a_broken_report_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], breakage: Callable[[dict], object]
) -> None:
    report = _saved_report()
    breakage(report)
    saved, png = tmp_path / "r.json", tmp_path / "r.png"
    saved.write_text(json.dumps(report))
    assert main(["bench", "--from-json", str(saved), "--chart", str(png)]) == 1
    out, err = capsys.readouterr()
    assert out == ""  # no half of the tables
    assert len(err.splitlines()) == 1 and err.startswith(
        f"edgespec: error: cannot read report {saved}"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no chart, no temporary file


def test_bench_bad_options(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["bench", "--reps", "0"]) == 1
    assert main(["bench", "--gammas", "auto,x"]) == 1
    assert main(["bench", "--llama-cpp-bin", str(tmp_path / "none")]) == 1
    assert main(["bench", "--llama-cpp-bin", str(tmp_path)]) == 1  # a folder without them
    err = capsys.readouterr().err
    assert "reps must be >= 1" in err and "gamma must be" in err and "no such folder" in err
    assert "no executable llama-lookup, llama-speculative-simple or llama-server in" in err
    assert not os.path.exists(tmp_path / "none")


def _forbid(monkeypatch: pytest.MonkeyPatch, owner: object, name: str, what: str) -> None:
    """Make owner.name fail the test if anything calls it."""

    def forbidden(*_a: object, **_k: object) -> None:
        raise AssertionError(what)

    monkeypatch.setattr(owner, name, forbidden)


def test_bench_refuses_an_unwritable_report_before_running(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import edgespec.commands.bench as bench_cmd

    _forbid(monkeypatch, bench_cmd, "_report", "the benchmark ran before its paths were checked")
    missing = tmp_path / "no" / "such" / "dir"
    assert main(["bench", "--json", str(missing / "r.json")]) == 1
    assert main(["bench", "--chart", str(missing / "r.png")]) == 1
    assert main(["bench", "--json", str(tmp_path)]) == 1  # a folder
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("edgespec: error: --") for line in err)
    assert "cannot write in" in err[0] and "is a folder" in err[2]
    assert list(tmp_path.iterdir()) == []  # no probe file left behind


def test_bench_report_is_replaced_whole_or_not_at_all(tmp_path: Path) -> None:
    from edgespec.commands.bench import _write_output

    out = tmp_path / "r.json"
    out.write_text("the previous report")

    def fail_halfway(tmp: Path) -> None:
        tmp.write_text("half a rep")
        raise OSError(28, "No space left on device")

    with pytest.raises(InvalidParameterError, match="--json: cannot write .*No space left"):
        _write_output(out, "--json", fail_halfway)
    assert out.read_text() == "the previous report"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    _write_output(out, "--json", lambda tmp: tmp.write_text("new"))
    assert out.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_bench_refuses_repeated_labels_before_loading(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import edgespec.bench.runner as runner

    _forbid(monkeypatch, runner, "load_pair", "a model was loaded")
    assert main(["bench", "--drafters", "a/x.gguf,b/x.gguf"]) == 1
    assert main(["bench", "--drafters", "ngram,ngram"]) == 1
    assert main(["bench", "--workloads", "chat,chat"]) == 1
    zero = tmp_path / "zero.toml"
    zero.write_text(TINY_WORKLOAD.replace("max_tokens = 12", "max_tokens = 0"))
    assert main(["bench", "--workloads", str(zero)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 4 and all(line.startswith("edgespec: error: ") for line in err)
    assert "a/x.gguf, b/x.gguf would share the label 'x'" in err[0]
    assert "drafter ngram is given more than once" in err[1]
    assert "workload named more than once: chat" in err[2]
    assert "max_tokens must be a whole number >= 1, got 0" in err[3]
    w = parse_workload(TINY_WORKLOAD)
    for kw in ({"gammas": [4, 4]}, {"llama_draft_lengths": [2, 2]}, {"workloads": [w, w]}):
        setup = BenchSetup(**{"target": "t", "drafters": ["ngram"], "workloads": [w],
                              "gammas": ["auto"], **kw})  # fmt: skip
        with pytest.raises(InvalidParameterError, match="is given more than once"):
            check_setup(setup)


def test_bench_runs_each_draft_length_and_gamma_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import edgespec.commands.bench as bench_cmd

    seen: list[BenchSetup] = []

    def capture(setup: BenchSetup, _workloads: list[Workload], _load: int = 0) -> dict:
        seen.append(setup)
        raise InvalidParameterError("captured")

    monkeypatch.setattr(bench_cmd, "_report", capture)
    assert main(["bench", "--gammas", "auto,4,4,2", "--llama-draft-lengths", "4,4,2,4"]) == 1
    assert seen[0].llama_draft_lengths == [4, 2] and seen[0].gammas == ["auto", 4, 2]
