#!/usr/bin/env python3
"""Prompt processing: edgespec's prefill against llama.cpp's `llama-bench -p N`.

For each thread count and prompt length N, alternating, with repetitions (llama-bench
one repetition per run, a fresh process): llama-bench at llama.cpp's defaults and with
one of edgespec's kernel settings each (BF16 keys, GGML_CPU_TILED_MM=0), and edgespec
decoding an N-token prompt (``LlamaModel.decode(tokens, logits="none")``, wall time)
on the tiled kernel (as it ships, with scripts/patches/ggml-cpu-tiled-mode.patch) and on
the one-row kernel (as before the patch), those two in turn in one process. On a busy
machine ``--cpu`` measures CPU time instead of wall time (meaningful with one thread:
two spin at barriers).

    .venv/bin/python benchmarks/bench_prompt.py --llama-bench /tmp/llama-bin/build/bin/llama-bench \
        --threads 1,2 --prompts 512,2048 --reps 5 --json out.json

With ``--server LLAMA_SERVER`` it compares the servers instead: llama-server and
``edgespec serve`` (one slot each, started once per thread count), a /completion of an
N-token prompt (n_predict 1, cache_prompt false, a new text each time) in turn, client
wall time per prompt token (``--cpu``: the server process's CPU time).

On an Intel CPU with AMX llama.cpp's weight repacking crashes on batches (llama.cpp
issue 20824): every llama.cpp run there adds ``--repack 0`` (the baseline then).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

FILLER = "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun. "
LLAMA = {  # name: (environment, llama-bench flags)
    "llama": ({}, []),
    "llama-bf16k": ({}, ["-ctk", "bf16", "-ctv", "f16"]),
    "llama-untiled": ({"GGML_CPU_TILED_MM": "0"}, []),
}
EDGESPEC = ("edgespec", "edgespec-untiled")  # the tiled kernel for prompts, or not
# what importing edgespec sets for its own llama.cpp: llama.cpp's runs must not inherit it
EDGESPEC_ENV = ("GGML_CPU_TILED_MM", "GOMP_SPINCOUNT")


def llama_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of a llama.cpp process: this one's, less edgespec's kernel settings."""
    return {**{k: v for k, v in os.environ.items() if k not in EDGESPEC_ENV}, **extra}


PROBE = """
import json, sys, time
from edgespec import LlamaModel, resolve_model
path, threads, sizes, filler = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
clock = time.process_time if sys.argv[5] == "cpu" else time.perf_counter
out = {}
with LlamaModel(resolve_model(path), n_ctx=max(sizes) + 16, n_threads=threads) as m:
    toks = m.tokenize(filler * (max(sizes) // 10 + 1))
    m.decode(toks[:64], logits="none")  # warm-up, as llama-bench's
    for n in sizes:
        for tiled in (True, False):
            m.reset()
            t0 = clock()
            m.decode(toks[:n], logits="none", tiled=None if tiled else False)  # None: the rule
            name = "edgespec" if tiled else "edgespec-untiled"
            out[f"{name},{n}"] = n / (clock() - t0)
    out["tiled_prompts"] = m.tiled_prompts
print(json.dumps(out))
"""


def edgespec_pp(model: str, threads: int, sizes: list[int], cpu: bool) -> dict[str, float]:
    """Tokens/s of an N-token prefill, tiled (the rule) and one-row, per size."""
    cmd = [sys.executable, "-c", PROBE, model, str(threads), json.dumps(sizes), FILLER]
    cmd.append("cpu" if cpu else "wall")
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"edgespec run failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def llama_bench_pp(binary: str, path: str, n: int, threads: int, env, flags, cpu: bool) -> float:
    """llama-bench's pp tokens/s (one repetition: the script alternates). cpu: from the
    CPU time of a run of 3 repetitions less that of a run of 1 (load, warm-up, exit
    alike), for a busy machine, where wall time measures the neighbours."""
    used = []
    for reps in (1, 3) if cpu else (1,):
        cmd = [binary, "-m", path, "-p", str(n), "-n", "0", "-t", str(threads), "-r", str(reps)]
        before = os.times()
        out = subprocess.run(
            [*cmd, "-o", "json", *flags], env=llama_env(env), capture_output=True, text=True
        )
        after = os.times()
        if out.returncode:
            raise SystemExit(f"llama-bench {' '.join(flags)} failed (rc {out.returncode})")
        used.append(after.children_user + after.children_system
                    - before.children_user - before.children_system)  # fmt: skip
    if cpu:
        return 2 * n / (used[1] - used[0])
    return float(json.loads(out.stdout)[0]["avg_ts"])


def report(runs: dict[str, list[float]], base: str = "llama") -> None:
    """The Markdown table: median [min, max] tokens/s, and the ratio to the baseline's."""
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(f"| config | prompt | threads | tok/s median [min, max] | / {base} |")
    print("| --- | --- | --- | --- | --- |")
    for k in sorted(runs):
        name, n, t = k.split(",")
        ref = med.get(f"{base},{n},{t}")
        ratio = f"{med[k] / ref:.2f}x" if ref else "-"
        spread = f"{med[k]:.0f} [{min(runs[k]):.0f}, {max(runs[k]):.0f}]"
        print(f"| {name} | {n} | {t} | {spread} | {ratio} |")


def _has_amx() -> bool:
    """An Intel CPU with AMX (where llama.cpp's repacked matmul crashes)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            return any(ln.startswith("flags") and " amx_tile" in ln for ln in f)
    except OSError:
        return False


def _post(port: int, body: dict, timeout: float = 600) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/completion", json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def _wait_up(proc: subprocess.Popen, port: int) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"server on port {port} exited (rc {proc.returncode})")
        try:
            _post(port, {"prompt": "Hello", "n_predict": 1}, timeout=60)
            return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"server on port {port} never answered")


def _cpu_s(pid: int) -> float:
    """CPU seconds a process used so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def servers_pp(a: argparse.Namespace, path: str, extra: list[str]) -> dict[str, list[float]]:
    """Prompt tokens/s from the client: llama-server against edgespec serve, in turn."""
    runs: dict[str, list[float]] = {}
    for t in (int(x) for x in a.threads.split(",")):
        cmds = {
            "llama-server": [a.server, "-m", path, "-t", str(t), "-c", "4096", "-np", "1",
                             "--port", "18431", *(["--no-repack"] if extra else [])],
            "edgespec-serve": [sys.executable, "-m", "edgespec", "serve", "--target", a.model,
                               "--threads", str(t), "--ctx", "4096", "--parallel", "1",
                               "--port", "18432", "--quiet"],
        }  # fmt: skip
        envs = {"llama-server": llama_env({}), "edgespec-serve": dict(os.environ)}
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        procs = {k: subprocess.Popen(c, env=envs[k], **quiet) for k, c in cmds.items()}
        try:
            for k, port in (("llama-server", 18431), ("edgespec-serve", 18432)):
                _wait_up(procs[k], port)
            for rep in range(a.reps):
                for n in (int(x) for x in a.prompts.split(",")):
                    words = FILLER.split()
                    text = " ".join(words[(i * 7 + rep) % len(words)] for i in range(n))
                    for k, port in (("llama-server", 18431), ("edgespec-serve", 18432)):
                        body = {"prompt": text, "n_predict": 1, "cache_prompt": False,
                                "temperature": 0}  # fmt: skip
                        pid = procs[k].pid
                        t0 = _cpu_s(pid) if a.cpu else time.perf_counter()
                        got = _post(port, body)
                        wall = (_cpu_s(pid) if a.cpu else time.perf_counter()) - t0
                        pn = got["timings"]["prompt_n"] + got["timings"].get("cache_n", 0)
                        runs.setdefault(f"{k},{n},{t}", []).append(pn / wall)
                print(f"threads {t} rep {rep + 1}/{a.reps}", file=sys.stderr)
        finally:
            for proc in procs.values():
                proc.terminate()
                proc.wait(30)
    return runs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--llama-bench", required=True)
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--threads", default="1,2", help="comma-separated")
    p.add_argument("--prompts", default="512,2048", help="comma-separated prompt lengths")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--configs", default=",".join([*LLAMA, *EDGESPEC]))
    p.add_argument("--json", help="write every run and the summary here")
    p.add_argument("--server", help="llama-server binary: compare the servers instead")
    p.add_argument("--cpu", action="store_true", help="CPU time, not wall (a busy machine)")
    a = p.parse_args()
    from edgespec import resolve_model

    path = str(resolve_model(a.model))
    extra = ["--repack", "0"] if _has_amx() else []
    configs = a.configs.split(",")
    sizes = [int(x) for x in a.prompts.split(",")]
    if a.server:
        runs = servers_pp(a, path, extra)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"runs": runs, "load": os.getloadavg(), "time": time.ctime()}, f)
        report(runs, base="llama-server")
        return 0
    runs: dict[str, list[float]] = {}
    for rep in range(a.reps):
        for t in (int(x) for x in a.threads.split(",")):
            if any(c in EDGESPEC for c in configs):
                for key, tps in edgespec_pp(a.model, t, sizes, a.cpu).items():
                    if key.split(",")[0] in configs:
                        runs.setdefault(f"{key},{t}", []).append(tps)
            for n in sizes:
                for name in (c for c in configs if c in LLAMA):
                    env, flags = LLAMA[name]
                    tps = llama_bench_pp(a.llama_bench, path, n, t, env, [*flags, *extra], a.cpu)
                    runs.setdefault(f"{name},{n},{t}", []).append(tps)
        print(f"rep {rep + 1}/{a.reps} done, load {os.getloadavg()[0]:.1f}", file=sys.stderr)
        if a.json:  # after every repetition: a cut-short run keeps what it measured
            with open(a.json, "w") as f:
                info = {"load": os.getloadavg(), "repack_off": bool(extra), "time": time.ctime()}
                json.dump({"runs": runs, "reps_done": rep + 1, **info}, f, indent=1)
    report(runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
