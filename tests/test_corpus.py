"""The benchmark corpus: benchmarks/make_corpus.py's output, the split, the distribution
statistics on hand-made numbers, and ``edgespec bench --corpus`` end to end on the
synthetic models (nothing here asserts on timings)."""

from __future__ import annotations

import importlib.util
import json
import stat
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from edgespec.bench.corpus import (
    NEVER_LOSES,
    by_kind,
    corpus_goals,
    describe,
    distribution,
    load_corpus,
    percentile,
    split_of,
)
from edgespec.bench.stats import median_interval
from edgespec.bench.workloads import parse_workload
from edgespec.cli import main
from edgespec.errors import InvalidParameterError

ROOT = Path(__file__).resolve().parent.parent
LICENSES = Path("/usr/share/common-licenses")


@pytest.fixture(scope="module")
def make_corpus():
    spec = importlib.util.spec_from_file_location(
        "make_corpus", ROOT / "benchmarks" / "make_corpus.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_corpus"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def corpus(make_corpus, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("corpus")
    assert make_corpus.main([str(out)]) == 0
    return out


# ------------------------------------------------------------------ make_corpus


def test_make_corpus_writes_parsable_workloads_of_six_kinds(corpus: Path) -> None:
    files = sorted(corpus.rglob("*.toml"))
    manifest = json.loads((corpus / "manifest.json").read_text())
    assert len(files) == len(manifest["workloads"])
    if LICENSES.is_dir() and Path("/usr/share/doc").is_dir():  # a Debian machine
        assert len(files) >= 60
    kinds: dict[str, int] = {}
    for path in files:
        text = path.read_text(encoding="utf-8")
        w = parse_workload(text)
        assert w.name == path.stem
        assert path.parent.name == split_of(w.name)  # the folder is the hash's split
        assert 64 <= w.max_tokens <= 128
        assert 600 <= len(w.prompt) <= 6000, (w.name, len(w.prompt))
        assert w.kind in ("edit", "quote", "summarise", "code", "revise", "write")
        if w.kind == "write":
            assert 0.7 <= w.temperature <= 1.0
        else:
            assert w.temperature == 0.0
        kinds[w.kind] = kinds.get(w.kind, 0) + 1
    assert len(kinds) >= 6 and min(kinds.values()) >= 8
    splits = {w["split"] for w in manifest["workloads"]}
    assert splits == {"tuning", "validation"}


def test_make_corpus_is_deterministic(make_corpus, corpus: Path, tmp_path: Path) -> None:
    assert make_corpus.main([str(tmp_path), "--per-kind", "3"]) == 0
    again = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*.toml")}
    assert len(again) == 18
    for rel, data in again.items():  # the first three of each kind: the same files
        assert (corpus / rel).read_bytes() == data, rel


def test_edit_and_revise_prompts_ask_for_what_the_model_copies(corpus: Path) -> None:
    for path in corpus.rglob("edit-*.toml"):
        w = parse_workload(path.read_text())
        assert w.prompt.count("```python\n") == 3 and "renames the" in w.prompt
    for path in corpus.rglob("revise-*.toml"):
        w = parse_workload(path.read_text())
        assert w.prompt.count("User:") == 3 and w.prompt.endswith("\n")


def test_toml_string_survives_any_text(make_corpus) -> None:
    nasty = 'a """ b \\ c \' d \x0c e\tf\r\n\\u0041 \x7f'
    doc = tomllib.loads(f"x = {make_corpus.toml_string(nasty)}")
    assert doc["x"] == nasty


def test_missing_sources_are_skipped(make_corpus, monkeypatch: pytest.MonkeyPatch) -> None:
    gone = Path("/nonexistent-edgespec")
    monkeypatch.setattr(make_corpus.sources, "LICENSES", gone)
    monkeypatch.setattr(make_corpus.sources, "DOCS", gone)
    monkeypatch.setattr(make_corpus.sources, "MAN", gone)
    items = make_corpus.build_corpus(2)
    kinds = {i.kind for i in items}
    assert "quote" not in kinds  # nothing to quote from
    assert {"edit", "code", "revise", "summarise", "write"} <= kinds  # Python's own text


# ------------------------------------------------------------------ the split


def test_split_is_a_fixed_hash_of_the_name() -> None:
    assert split_of("edit-textwrap") == "tuning"
    assert split_of("quote-gpl-2") == "validation"
    assert [split_of(n) for n in "abcdef"] == ["validation", "validation", "tuning",
                                              "tuning", "tuning", "validation"]  # fmt: skip


def _workload(name: str, kind: str = "edit") -> str:
    return f'name = "{name}"\nkind = "{kind}"\nmax_tokens = 8\nprompt = "a b a b a b"\n'


def test_load_corpus(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    for n in "abc":
        (tmp_path / "sub" / f"{n}.toml").write_text(_workload(n))
    (tmp_path / "d.toml").write_text(_workload("d", "quote"))
    assert [w.name for w in load_corpus(tmp_path, "validation")] == ["a", "b"]
    assert {w.name for w in load_corpus(tmp_path, "tuning")} == {"c", "d"}
    assert len(load_corpus(tmp_path, "all")) == 4
    with pytest.raises(InvalidParameterError, match="split"):
        load_corpus(tmp_path, "train")
    with pytest.raises(InvalidParameterError, match="no such folder"):
        load_corpus(tmp_path / "nope")
    (tmp_path / "again.toml").write_text(_workload("a"))
    with pytest.raises(InvalidParameterError, match="twice"):
        load_corpus(tmp_path)


def test_load_corpus_with_nothing_selected(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text(_workload("c"))
    with pytest.raises(InvalidParameterError, match="no validation workloads"):
        load_corpus(tmp_path, "validation")


@pytest.mark.parametrize("kind", ['"Edit"', '"two words"', "3", '"-x"'])
def test_workload_kind_is_checked(kind: str) -> None:
    with pytest.raises(InvalidParameterError, match="kind"):
        parse_workload(f'name = "x"\nkind = {kind}\nprompt = "p"\n')
    assert parse_workload('name = "x"\nprompt = "p"\n').kind == ""
    assert parse_workload('name = "x"\nkind = "edit_2"\nprompt = "p"\n').kind == "edit_2"


# ------------------------------------------------------------------ statistics


def test_percentile_and_describe() -> None:
    assert percentile([], 0.1) is None
    assert percentile([5.0, 1.0, 3.0], 0.1) == 1.0  # fewer than 10: the minimum
    vals = [float(v) for v in range(1, 21)]  # 1..20
    assert percentile(vals, 0.10) == 2.0  # nearest rank: ceil(2) = 2nd
    assert percentile(vals, 0.5) == 10.0 and percentile(vals, 1.0) == 20.0
    d = describe([1.2, 0.9, 1.0, 1.5])
    assert d == {"n": 4, "median": pytest.approx(1.1), "p10": 0.9, "worst": 0.9}
    assert describe([])["median"] is None


def _text(kind: str, split: str, plain: float | None, fixed: float | None,
          lookup: float | None, reps: int = 3) -> dict:  # fmt: skip
    return {"kind": kind, "split": split, "reps": reps, "auto_vs_plain": plain,
            "auto_vs_best_fixed": fixed, "auto_vs_lookup": lookup}  # fmt: skip


def test_by_kind_per_split() -> None:
    texts = {
        "e1": _text("edit", "validation", 2.0, 1.0, 1.3),
        "e2": _text("edit", "validation", 1.0, 0.9, 1.1),
        "e3": _text("edit", "validation", 3.0, 0.95, None),
        "w1": _text("write", "validation", 0.96, 1.02, 0.8),
        "t1": _text("edit", "tuning", 5.0, 1.0, 2.0),
    }
    out = by_kind(texts)
    assert set(out) == {"tuning", "validation"}
    edit = out["validation"]["edit"]
    assert edit["texts"] == 3
    assert edit["auto_vs_plain"] == {"n": 3, "median": 2.0, "p10": 1.0, "worst": 1.0}
    lookup = edit["auto_vs_lookup"]
    assert lookup["n"] == 2 and lookup["median"] == pytest.approx(1.2)
    every = out["validation"]["all"]
    assert every["texts"] == 4 and every["auto_vs_plain"]["worst"] == 0.96
    assert out["tuning"]["edit"]["auto_vs_plain"]["median"] == 5.0  # not mixed in


def test_corpus_goals() -> None:
    texts = {f"e{i}": _text("edit", "validation", 1.5, 1.0, 1.3) for i in range(9)}
    texts["q"] = _text("quote", "validation", 1.2, 0.91, 1.2)
    texts["t"] = _text("edit", "tuning", 0.5, 0.5, 0.5)  # the tuning half judges itself only
    goals = {g["goal"]: g for g in corpus_goals(texts, "validation")}
    assert goals["never loses: worst text, auto / plain"]["met"] is True
    share = goals["auto / best fixed gamma: share of texts >= 0.92"]
    assert share["value"] == pytest.approx(0.9) and share["met"] is True
    assert goals["edit: auto / llama-lookup best, median"]["met"] is True
    assert goals["quote: auto / llama-lookup best, median"]["met"] is False
    assert "revise: auto / llama-lookup best, median" not in goals  # none measured
    texts["w"] = _text("write", "validation", NEVER_LOSES - 0.001, 1.0, None)
    worst = corpus_goals(texts, "validation")[0]
    assert worst["value"] == pytest.approx(0.969) and worst["met"] is False
    texts["w"]["reps"] = 1
    assert all(g["met"] is None and "repetitions" in g["not_judged"]
               for g in corpus_goals(texts, "validation"))  # fmt: skip
    tuning = corpus_goals(texts, "tuning")
    assert tuning[0]["split"] == "tuning" and tuning[0]["met"] is False


def test_median_interval_is_the_sign_tests() -> None:
    vals = [1.0, 0.9, 1.2, 0.8, 1.1, 0.95, 1.05, 1.3]
    assert median_interval(vals) == (0.9, 1.2)  # n = 8: the 2nd smallest and 2nd largest
    assert median_interval(vals[:5]) == (0.8, 1.2)  # n = 5: the extremes (93.75%)
    assert median_interval(vals[:4]) is None  # the extremes hold it only 87.5% of the time
    assert median_interval(vals[:4], level=0.8) == (0.8, 1.2)


def test_median_interval_covers_the_median_as_often_as_it_says() -> None:
    # a skewed distribution whose median is known: exp(N(0, 1)) has median 1.0
    rng = np.random.default_rng(7)
    for n in (5, 8, 12):
        draws = np.exp(rng.normal(size=(4000, n)))
        held = [lo <= 1.0 <= hi for lo, hi in map(median_interval, draws.tolist())]
        assert 0.90 <= sum(held) / len(held) <= 0.99


def test_never_loses_counts_only_texts_that_surely_lose() -> None:
    texts = {f"e{i}": _text("edit", "validation", 1.5, 1.0, 1.3, reps=8) for i in range(4)}
    for t in texts.values():
        t["auto_vs_plain_interval"] = (1.2, 1.8)
    noisy = _text("summarise", "validation", 0.95, 1.0, None, reps=8)
    texts["noisy"] = noisy | {"auto_vs_plain_interval": (0.88, 1.01)}
    goals = {g["goal"]: g for g in corpus_goals(texts, "validation")}
    assert goals["never loses: worst text, auto / plain"]["met"] is False  # 0.95 < 0.97
    sure = goals["never loses: share of texts whose 90% interval reaches 0.97x"]
    assert sure["value"] == 1.0 and sure["met"] is True  # ... but not surely
    texts["noisy"]["auto_vs_plain_interval"] = (0.90, 0.96)  # now it surely loses
    sure = {g["goal"]: g for g in corpus_goals(texts, "validation")}[sure["goal"]]
    assert sure["value"] == pytest.approx(0.8) and sure["met"] is False
    texts["noisy"]["auto_vs_plain_interval"] = None  # too few repetitions: not reported
    assert sure["goal"] not in {g["goal"] for g in corpus_goals(texts, "validation")}


def test_distribution_reads_a_report() -> None:
    def row(tps: list[float], kind: str = "edgespec", gamma: object = 0) -> dict:
        return {"kind": kind, "gamma": gamma, "tokens_per_second": tps[0]}

    report = {
        "drafters": {"ngram": {}},
        "workloads": {
            "a": {"kind": "edit", "plain_spread": 0.05, "configs": {"plain": row([10.0])},
                  "auto": {"ngram": {"speedup": 2.0, "vs_best_fixed": 0.97,
                                     "best_fixed_gamma": 8, "reps": 2}},
                  "vs_llama_lookup": 1.4, "llama_lookup_best": 16},
            "c": {"kind": "write", "plain_spread": 0.15, "configs": {"plain": row([9.0])},
                  "auto": {"ngram": {"speedup": 0.99, "reps": 2}}},
        },
    }  # fmt: skip
    d = distribution(report)
    assert d["drafter"] == "ngram"
    assert d["texts"]["a"]["split"] == "validation" and d["texts"]["c"]["split"] == "tuning"
    assert d["texts"]["a"]["auto_vs_lookup"] == 1.4 and d["texts"]["a"]["lookup_best"] == 16
    assert d["texts"]["c"]["auto_vs_best_fixed"] is None
    assert d["plain_spread"] == {"median": pytest.approx(0.10), "max": 0.15}
    assert d["kinds"]["validation"]["edit"]["auto_vs_best_fixed"]["median"] == 0.97
    assert d["texts"]["a"]["auto_vs_plain_interval"] is None  # no repetitions saved
    plain = [10.0, 12.0, 11.0, 9.0, 10.0]
    report["workloads"]["a"]["configs"] |= {
        "plain": row(plain) | {"tokens_per_second_all": plain},
        "ngram auto": row(plain) | {"tokens_per_second_all": [20.0, 18.0, 22.0, 27.0, None]},
    }
    # paired per repetition, the 5th (failed) left out: 2.0, 1.5, 2.0, 3.0
    assert distribution(report)["texts"]["a"]["auto_vs_plain_interval"] is None
    report["workloads"]["a"]["configs"]["ngram auto"]["tokens_per_second_all"][4] = 25.0
    assert distribution(report)["texts"]["a"]["auto_vs_plain_interval"] == (1.5, 3.0)


# ------------------------------------------------------------------ end to end

LOOKUP_OUTPUT = """\
the cat sat on the mat
0.08.342.913 I encoded   15 tokens in    0.642 seconds, speed:   76.358 t/s
0.08.342.914 I decoded   34 tokens in    3.678 seconds, speed:    9.245 t/s
0.08.342.914 I n_draft      = 4
0.08.342.915 I n_drafted    = 28
0.08.342.916 I n_accept     = 24
"""


def test_bench_corpus_end_to_end(
    synthetic_models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "corpus"
    (folder / "validation").mkdir(parents=True)
    # a, b: validation; c: tuning (by the hash, wherever the files are)
    for name, kind in (("a", "edit"), ("b", "write"), ("c", "edit")):
        (folder / "validation" / f"{name}.toml").write_text(_workload(name, kind))
    bins = tmp_path / "bin"
    bins.mkdir()
    (tmp_path / "out.txt").write_text(LOOKUP_OUTPUT)
    lookup = bins / "llama-lookup"
    lookup.write_text(f'#!/bin/sh\ncat "{tmp_path / "out.txt"}"\n')
    lookup.chmod(lookup.stat().st_mode | stat.S_IXUSR)
    out, png = tmp_path / "out.json", tmp_path / "out.png"
    rc = main(
        [
            "bench", "--target", str(synthetic_models["target"]), "--corpus", str(folder),
            "--split", "validation", "--reps", "2", "--max-tokens", "8", "--gammas", "auto,2",
            "--llama-cpp-bin", str(bins), "--llama-draft-lengths", "2",
            "--json", str(out), "--chart", str(png),
        ]
    )  # fmt: skip
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["corpus"] == {"dir": str(folder), "split": "validation"}
    assert set(report["workloads"]) == {"a", "b"}  # c is in the tuning half
    assert report["workloads"]["a"]["kind"] == "edit"
    dist = report["distribution"]
    assert set(dist["texts"]) == {"a", "b"}
    for t in dist["texts"].values():
        assert t["split"] == "validation" and t["reps"] == 2
        assert t["auto_vs_plain"] > 0 and t["auto_vs_best_fixed"] > 0 and t["auto_vs_lookup"] > 0
        assert t["best_fixed_gamma"] == 2 and t["lookup_best"] == 2
    assert set(dist["kinds"]["validation"]) == {"edit", "write", "all"}
    assert dist["kinds"]["validation"]["all"]["auto_vs_plain"]["n"] == 2
    goal_names = [g["goal"] for g in dist["goals"]]
    assert "never loses: worst text, auto / plain" in goal_names
    assert "edit: auto / llama-lookup best, median" in goal_names
    assert all(g["met"] is not None for g in dist["goals"])  # 2 reps: judged
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = capsys.readouterr().out
    assert "## Corpus: distributions" in text and "| validation | edit | 1 |" in text
    # the saved report prints the same distributions again, without running
    assert main(["bench", "--from-json", str(out)]) == 0
    again = capsys.readouterr().out
    assert again[again.index("## Corpus") :] == text[text.index("## Corpus") :]


def test_bench_corpus_refuses_bad_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.toml").write_text(_workload("a"))
    assert main(["bench", "--corpus", str(tmp_path), "--workloads", "chat"]) == 1
    assert main(["bench", "--corpus", str(tmp_path), "--split", "tuning"]) == 1
    assert main(["bench", "--corpus", str(tmp_path / "nope")]) == 1
    err = capsys.readouterr().err
    assert "not both" in err and "no tuning workloads" in err and "no such folder" in err
