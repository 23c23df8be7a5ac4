"""edgespec bench against llama-server: its command, its replies, the per-text ratios and
goals, conversation workloads and the shipped agent-turn corpus, and a whole run with a
fake llama-server (one server at a time). Nothing here asserts on timings."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from edgespec.bench import llamaserver
from edgespec.bench.corpus import load_corpus, split_of
from edgespec.bench.llamacpp import LlamaCppError
from edgespec.bench.vs_server import compare_text, comparison, comparison_text, goals
from edgespec.bench.workloads import parse_workload, shipped_corpus
from edgespec.cli import main
from edgespec.errors import InvalidParameterError

REPLY = {
    "content": " the mat",
    "timings": {
        "prompt_n": 120, "prompt_ms": 250.0, "predicted_n": 32, "predicted_ms": 800.0,
        "predicted_per_second": 40.0, "draft_n": 48, "draft_n_accepted": 20,
    },
}  # fmt: skip

CONVERSATION = '''\
name = "talk"
kind = "agent"
chat = true
max_tokens = 8

[[messages]]
role = "system"
content = "You are terse."

[[messages]]
role = "user"
content = """Show me the file."""
'''


def test_parse_reply_reads_the_timings() -> None:
    r = llamaserver.parse_reply(REPLY)
    assert (r.decoded, r.decode_s, r.tokens_per_second) == (32, 0.8, 40.0)
    assert (r.prompt_s, r.prompt_tokens, r.drafted, r.accepted) == (0.25, 120, 48, 20)
    rec = r.to_record()
    assert rec.prompt_s == 0.25 and rec.decode_s == 0.8 and rec.acceptance_rate == 20 / 48
    plain = llamaserver.parse_reply({"timings": {"prompt_ms": 1.0, "predicted_ms": 2.0}})
    assert plain.drafted == 0 and plain.accepted == 0
    with pytest.raises(LlamaCppError, match="no timings"):
        llamaserver.parse_reply({"content": "x"})


def test_command_runs_one_slot_with_the_spec_type() -> None:
    def cmd(t: str, **kw: bool) -> list[str]:
        return llamaserver.command(
            Path("/b/llama-server"), target=Path("/m.gguf"), port=8123, spec_type=t,
            threads=2, n_ctx=4096, **kw,
        )  # fmt: skip

    c = cmd("ngram-mod", no_repack=True)
    assert c[c.index("--spec-type") + 1] == "ngram-mod"
    assert c[c.index("-np") + 1] == "1" and c[c.index("-t") + 1] == "2"
    assert c[c.index("--port") + 1] == "8123" and "--no-repack" in c
    plain = cmd("none", swa_full=True)
    assert "--spec-type" not in plain and "--swa-full" in plain


def test_parse_types() -> None:
    assert llamaserver.parse_types("none, ngram-mod,none") == ["none", "ngram-mod"]
    with pytest.raises(ValueError, match="unknown llama-server type 'draft'"):
        llamaserver.parse_types("draft")
    with pytest.raises(ValueError, match="no llama-server types"):
        llamaserver.parse_types(" , ")


def _row(kind: str, gamma: object, tps: list[float], reply: list[float]) -> dict:
    mid = sorted(tps)[len(tps) // 2]
    return {"kind": kind, "gamma": gamma, "reps": len(tps), "tokens_per_second": mid,
            "tokens_per_second_all": tps, "reply_s_all": reply}  # fmt: skip


def _workload(auto: list[float]) -> dict:
    return {
        "configs": {
            "plain": _row("edgespec", 0, [40.0] * 5, [3.0] * 5),
            "ngram auto": _row("edgespec", "auto", auto, [2.0] * 5),
            "llama-server none": _row("llama-server", "none", [42.0] * 5, [2.9] * 5),
            "llama-server ngram-mod": _row("llama-server", "ngram-mod", [50.0] * 5, [2.5] * 5),
            "llama-server ngram-simple": _row(
                "llama-server", "ngram-simple", [60.0] * 5, [2.6] * 5
            ),  # fmt: skip
        }
    }


def test_compare_text_takes_the_best_type_per_text_and_paired_ratios() -> None:
    c = compare_text(_workload([66.0, 72.0, 60.0, 78.0, 69.0]))
    assert c is not None
    assert c["best_type"] == "ngram-simple"  # the highest median tok/s
    assert c["vs_best"]["median"] == pytest.approx(69 / 60)
    assert c["vs_best"]["min"] == pytest.approx(1.0) and c["vs_best"]["max"] == pytest.approx(1.3)
    assert c["vs_plain"]["median"] == pytest.approx(69 / 42)
    assert c["reply_best_type"] == "ngram-mod"  # the fastest whole reply, any type
    assert c["reply_vs_best"]["median"] == pytest.approx(2.5 / 2.0)
    assert compare_text({"configs": {"ngram auto": _row("edgespec", "auto", [1.0], [1.0])}}) is None


def test_goals_per_split_and_unjudged_with_few_repetitions() -> None:
    report = {"workloads": {"a": _workload([70.0] * 5), "b": _workload([40.0] * 5)}}
    c = comparison(report)
    assert c is not None and {g["split"] for g in c["goals"]} == {"all"}
    by = {g["goal"].split(":")[0]: g for g in c["goals"]}
    assert by["ngram auto / llama-server plain"]["value"] == pytest.approx(40 / 42)
    assert by["ngram auto / llama-server plain"]["met"] is False
    assert by["whole reply"]["met"] is True
    text = comparison_text(c, corpus=False)
    assert "| a | 70.0 | ngram-simple (60.0) | 1.17x [1.17-1.17] |" in text
    few = {"a": {**compare_text(_workload([70.0] * 5)), "reps": 2}}  # type: ignore[dict-item]
    assert all(g["met"] is None for g in goals(few, None))
    corpus = comparison({**report, "corpus": {"dir": "x"}})
    assert corpus is not None
    assert {g["split"] for g in corpus["goals"]} == {split_of("a"), split_of("b")}


def test_conversation_workloads() -> None:
    w = parse_workload(CONVERSATION)
    assert w.messages == (("system", "You are terse."), ("user", "Show me the file."))
    assert w.chat and w.kind == "agent"
    assert w.prompt.endswith("User: Show me the file.\n\nAssistant:")  # without a template
    with pytest.raises(InvalidParameterError, match="messages need chat = true"):
        parse_workload(CONVERSATION.replace("chat = true", "chat = false"))
    with pytest.raises(InvalidParameterError, match="each needs a role"):
        parse_workload(CONVERSATION.replace('role = "system"', 'role = "tool"'))
    with pytest.raises(InvalidParameterError, match="non-empty array"):
        parse_workload('name = "x"\nchat = true\nmessages = []\n')


def test_render_conversation_in_chatml_without_a_template(
    synthetic_models: dict[str, Path],
) -> None:
    from edgespec.backend import LlamaModel
    from edgespec.bench.runner import render_workload

    model = LlamaModel(synthetic_models["target"], n_ctx=256, n_threads=1)
    try:
        assert not model.chat_template()
        prompt = render_workload(model, parse_workload(CONVERSATION)).prompt
    finally:
        model.close()
    assert prompt.startswith("<|im_start|>system\nYou are terse.<|im_end|>\n")
    assert prompt.endswith("Show me the file.<|im_end|>\n<|im_start|>assistant\n")


def test_the_shipped_agent_corpus() -> None:
    folder = shipped_corpus("agent")
    assert folder is not None and shipped_corpus("nothing-here") is None
    texts = load_corpus(folder)
    val = load_corpus(folder, "validation")
    assert len(texts) >= 16 and len(val) >= 8
    for w in texts:
        assert w.kind == "agent" and w.chat and w.greedy
        assert w.messages[0][0] == "system" and w.messages[-1][0] == "user", w.name
        assert "tool_result" in w.prompt and "read_file" in w.prompt
    assert len({w.name.split("-")[1] for w in val}) >= 6  # most reply kinds validated


FAKE_SERVER = """\
import json, os, signal, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
argv = sys.argv[1:]
lock = os.path.join(os.path.dirname(os.path.abspath(__file__)), "running")
if os.path.exists(lock):
    sys.exit("two servers at once")
open(lock, "w").close()
def bye(*_):
    os.remove(lock)
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
spec = argv[argv.index("--spec-type") + 1] if "--spec-type" in argv else "none"
class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def _send(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self._send({"status": "ok"})
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with open(os.path.join(os.path.dirname(lock), "requests"), "a") as f:
            f.write(json.dumps({"spec": spec, **req}) + "\\n")
        n = req["n_predict"]
        t = {"prompt_n": 10, "prompt_ms": 20.0, "predicted_n": n, "predicted_ms": 100.0 * n,
             "predicted_per_second": 10.0}
        if spec != "none":
            t.update(draft_n=8, draft_n_accepted=4)
        self._send({"content": "x", "timings": t})
HTTPServer(("127.0.0.1", int(argv[argv.index("--port") + 1])), H).serve_forever()
"""


def test_bench_runs_llama_server_types_one_at_a_time(
    synthetic_models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bins = tmp_path / "bin"
    bins.mkdir()
    fake = bins / "llama-server"
    fake.write_text(f"#!{sys.executable}\n" + FAKE_SERVER)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    talk = tmp_path / "talk.toml"
    talk.write_text(CONVERSATION)
    out = tmp_path / "out.json"
    rc = main(
        [
            "bench", "--target", str(synthetic_models["target"]), "--drafters", "ngram",
            "--workloads", str(talk), "--reps", "2", "--max-tokens", "6", "--gammas", "auto",
            "--llama-cpp-bin", str(bins), "--llama-draft-lengths", "none",
            "--llama-server-types", "none,ngram-mod", "--json", str(out),
        ]
    )  # fmt: skip
    assert rc == 0
    assert not (bins / "running").exists()  # every server was stopped
    report = json.loads(out.read_text())
    rows = report["workloads"]["talk"]["configs"]
    assert set(rows) == {"plain", "ngram auto", "llama-server none", "llama-server ngram-mod"}
    assert rows["llama-server ngram-mod"]["acceptance_rate"] == 0.5
    assert all(x is not None and x > 0 for x in rows["ngram auto"]["reply_s_all"])
    reqs = [json.loads(x) for x in (bins / "requests").read_text().splitlines()]
    timed = [r for r in reqs if r["prompt"] != "Hello"]  # each server's warm-up is "Hello"
    assert len(reqs) == 2 * len(timed) == 8
    assert {r["n_predict"] for r in timed} == {6} and all(r["temperature"] == 0 for r in timed)
    chatml = "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nShow me"
    assert len({r["prompt"] for r in timed}) == 1 and timed[0]["prompt"].startswith(chatml)
    c = report["vs_llama_server"]["texts"]["talk"]
    assert c["best_type"] == "ngram-mod" and c["vs_plain"]["n"] == 2
    assert "Against llama-server" in capsys.readouterr().out
