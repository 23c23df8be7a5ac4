"""edgespec bench: statistics and projection, llama.cpp output parsing, workloads, CLI end to end.

The end-to-end tests run on the synthetic models and a fake llama.cpp binary;
nothing here asserts on timings.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

import pytest

from edgespec.bench import llamacpp
from edgespec.bench.report import build_report, text_report
from edgespec.bench.runner import CEILING_SIZES
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
from edgespec.bench.workloads import builtin_workloads, parse_workload, select_workloads
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


def test_paired_ratios_skip_failed_reps() -> None:
    assert median_ratio([2.0, 3.0, 8.0], [1.0, 1.0, 2.0]) == pytest.approx(3.0)
    assert median_ratio([2.0, None, 9.0], [1.0, 1.0, 3.0]) == pytest.approx(2.5)
    assert median_ratio([2.0], [None]) == 0.0


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


def test_command_uses_the_workload_verbatim() -> None:
    w = parse_workload(TINY_WORKLOAD)
    cmd = llamacpp.command(
        Path("/b/llama-lookup"), target=Path("t.gguf"), workload=w, max_tokens=12, threads=2,
        n_ctx=512, n_draft=8, seed=1,
    )  # fmt: skip
    assert cmd[cmd.index("-p") + 1] == w.prompt  # -f would drop a trailing newline
    assert cmd[cmd.index("--spec-draft-n-max") + 1] == "8"
    assert cmd[cmd.index("-t") + 1] == "2" and "--swa-full" in cmd and "-md" not in cmd
    spec = llamacpp.command(
        Path("/b/llama-speculative-simple"), target=Path("t.gguf"), workload=w, max_tokens=12,
        threads=2, n_ctx=512, n_draft=4, seed=1, draft=Path("d.gguf"),
    )  # fmt: skip
    assert spec[spec.index("-md") + 1] == "d.gguf"
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


def test_short_drafter_names() -> None:
    from edgespec.bench.runner import short_name

    assert short_name("ngram") == "ngram"
    assert short_name("/m/draft.gguf") == "draft"
    assert short_name("ngram+/m/draft.gguf") == "ngram+draft"
    assert short_name("qwen2.5-coder-0.5b-instruct") == "qwen2.5-coder-0.5b-instruct"


def test_bench_rerenders_from_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
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
    report = build_report(records, info, [parse_workload(TINY_WORKLOAD)], {"reps": 1})
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(report))
    png = tmp_path / "r.png"
    assert main(["bench", "--from-json", str(saved), "--chart", str(png)]) == 0
    assert png.stat().st_size > 0
    out = capsys.readouterr().out
    assert "1.20x" in out and out.strip() == text_report(report).strip()


def test_bench_bad_options(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["bench", "--reps", "0"]) == 1
    assert main(["bench", "--gammas", "auto,x"]) == 1
    assert main(["bench", "--llama-cpp-bin", str(tmp_path / "none")]) == 1
    err = capsys.readouterr().err
    assert "reps must be >= 1" in err and "gamma must be" in err and "no such folder" in err
    assert not os.path.exists(tmp_path / "none")


def test_bench_refuses_an_unwritable_report_before_running(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import edgespec.commands.bench as bench_cmd

    def must_not_run(*_a: object, **_k: object) -> dict:
        raise AssertionError("the benchmark ran before its output path was checked")

    monkeypatch.setattr(bench_cmd, "_report", must_not_run)
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
