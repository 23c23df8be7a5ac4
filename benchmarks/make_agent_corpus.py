#!/usr/bin/env python3
"""Write the agent-turn corpus: coding-agent conversations that end where the assistant's
turn begins.

Usage::

    .venv/bin/python benchmarks/make_agent_corpus.py [OUT_DIR]

OUT_DIR (default ``edgespec/bench/workloads/agent``, shipped with the bench: ``edgespec
bench --corpus agent``) gets one TOML workload per conversation (``kind = "agent"``,
``chat = true``, the conversation as ``[[messages]]``, rendered in the target's chat
template by the bench), in ``tuning/`` or ``validation/`` by a hash of its name
(``edgespec.bench.corpus.split_of``, fixed before any result is seen).

Each conversation is written here, from templates and real files (Python standard
library modules, so they are the same on machines with the same Python): a system
prompt describing five tools (read_file, write_file, run_shell, grep, apply_patch) and
how to call them, a user's task, earlier assistant turns that call tools, tool outputs
(file contents, test failures quoting the file, grep hits, diffs, logs, JSON), and a
last user message that asks for one of eight kinds of reply: the corrected function,
the whole file through write_file, the call sites in grep output, a commit message,
a test, what a log says, an edited JSON config, or an explanation. Most replies copy
what the conversation showed, some barely do. No text comes from a benchmark set.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/ is not a package

from corpus_sources import functions, stdlib_files, toml_string  # noqa: E402

from edgespec import parse_workload, split_of  # noqa: E402

OUT = ROOT / "edgespec" / "bench" / "workloads" / "agent"
MAX_TOKENS = 128
TOOLS = [
    ("read_file", "Read a file of the repository.", {"path": "string"}),
    ("write_file", "Replace a file's whole content.", {"path": "string", "content": "string"}),
    (
        "run_shell",
        "Run a shell command in the repository root; returns its output.",
        {"command": "string", "timeout_s": "integer"},
    ),  # fmt: skip
    (
        "grep",
        "Search the repository for a regular expression.",
        {"pattern": "string", "path": "string"},
    ),  # fmt: skip
    ("apply_patch", "Apply a unified diff to the repository.", {"diff": "string"}),
]


def system_prompt(repo: str) -> str:
    """The agent's system prompt: its job, its tools, how to call them."""
    tools = [
        {"name": n, "description": d,
         "parameters": {"type": "object", "properties": {k: {"type": t} for k, t in p.items()},
                        "required": list(p)}}
        for n, d, p in TOOLS
    ]  # fmt: skip
    return (
        f"You are a coding agent working in the repository {repo}. You can read and change "
        "files and run commands with these tools:\n\n"
        + "\n".join(json.dumps(t) for t in tools)
        + "\n\nTo call a tool, answer with one JSON object in a ```tool_call block: "
        '{"name": ..., "arguments": {...}}. Tool results come back in <tool_result> '
        "blocks. Quote code exactly as it is in the files. Be brief."
    )


def call(name: str, **arguments: object) -> str:
    """An assistant's tool call as the system prompt asks for it."""
    return "```tool_call\n" + json.dumps({"name": name, "arguments": arguments}) + "\n```"


def result(name: str, text: str) -> str:
    """A tool's output, as the user turn that carries it back."""
    return f'<tool_result name="{name}">\n{text}\n</tool_result>'


class Source:
    """A stdlib module and one function of it, with where the agent finds it."""

    def __init__(self, module: str, text: str, name: str, args: list[str], body: str) -> None:
        self.module, self.text, self.name, self.args, self.body = module, text, name, args, body
        self.path = "src/" + module.replace(".", "/") + ".py"
        self.repo = "/home/dev/" + module.split(".")[0].replace("_", "-")
        lines = text.splitlines()
        first = body.splitlines()[0].strip()
        self.line = next((i + 1 for i, x in enumerate(lines) if x.strip() == first), 1)

    def window(self, before: int = 6, after: int = 6) -> str:
        """The file around the function, numbered like `cat -n`."""
        lines = self.text.splitlines()
        n_body = len(self.body.splitlines())
        lo = max(0, self.line - 1 - before)
        hi = min(len(lines), self.line - 1 + n_body + after)
        return "\n".join(f"{i + 1:6d}\t{lines[i]}" for i in range(lo, hi))

    def arg(self) -> str:
        """The function's first argument other than self/cls (or 'value')."""
        return next((a for a in self.args if a not in ("self", "cls")), "value")


def sources() -> Iterator[Source]:
    """One function of 500-1,200 characters from each stdlib module, in a fixed order."""
    for module, _path, text in stdlib_files():
        for name, args, body in functions(text, 500, 1200):
            if len([a for a in args if a not in ("self", "cls")]) >= 1:
                yield Source(module, text, name, args, body)
                break


def opening(s: Source, task: str) -> list[dict[str, str]]:
    """System prompt, the task, the agent reading the file and the file shown."""
    return [
        {"role": "system", "content": system_prompt(s.repo)},
        {"role": "user", "content": task},
        {
            "role": "assistant",
            "content": f"I'll start by reading `{s.path}`.\n" + call("read_file", path=s.path),
        },  # fmt: skip
        {"role": "user", "content": result("read_file", s.window())},
    ]


def traceback_for(s: Source) -> str:
    """A pytest failure that quotes the function's first lines."""
    head = s.body.splitlines()[:4]
    quoted = "\n".join(f"    {x}" for x in head)
    test = f"test_{s.name.strip('_')}_handles_empty_{s.arg()}"
    return (
        f"============================= test session starts ==============================\n"
        f"collected 14 items\n\ntests/test_{s.module.split('.')[-1]}.py ......F.......\n\n"
        f"=================================== FAILURES ===================================\n"
        f"_{'_' * 10} {test} {'_' * 10}\n\n"
        f"    def {test}():\n>       assert {s.name}({s.arg()}=None) is not None\n\n"
        f"{s.path}:{s.line}: in {s.name}\n{quoted}\n"
        f"E   TypeError: unsupported operand for NoneType: '{s.arg()}'\n"
        f"=========================== short test summary info ============================\n"
        f"FAILED tests/test_{s.module.split('.')[-1]}.py::{test} - TypeError\n"
        f"========================= 1 failed, 13 passed in 0.41s ========================="
    )


def guarded(s: Source) -> str:
    """The function with a guard for a None first argument after its signature."""
    lines = s.body.splitlines()
    sig_end = next((i for i, x in enumerate(lines) if x.rstrip().endswith(":")), 0)
    indent = " " * 4
    guard = [f"{indent}if {s.arg()} is None:", f"{indent}    {s.arg()} = ''"]
    return "\n".join(lines[: sig_end + 1] + guard + lines[sig_end + 1 :])


def fix_show(s: Source) -> list[dict[str, str]]:
    msgs = opening(s, f"`{s.name}` in {s.path} crashes when `{s.arg()}` is None. Find out why.")
    msgs += [
        {
            "role": "assistant",
            "content": "Let me run its tests.\n"
            + call(
                "run_shell",
                command=f"python -m pytest tests/test_{s.module.split('.')[-1]}.py -q",
                timeout_s=120,
            ),
        },  # fmt: skip
        {"role": "user", "content": result("run_shell", traceback_for(s))},
        {
            "role": "user",
            "content": "Show me the whole function with a fix for None, as it "
            "should be in the file.",
        },  # fmt: skip
    ]
    return msgs


def write_whole(s: Source) -> list[dict[str, str]]:
    new = s.name.strip("_") + "_impl"
    msgs = opening(s, f"Rename `{s.name}` in {s.path} to `{new}` (keep the behaviour).")
    msgs += [{"role": "user", "content": f"Call write_file with the updated function `{new}` "
              "(the complete code, nothing left out)."}]  # fmt: skip
    return msgs


def grep_sites(s: Source) -> list[dict[str, str]]:
    msgs = opening(s, f"Who calls `{s.name}`? I want to change its signature.")
    lines = s.text.splitlines()
    hits = [f"{s.path}:{i + 1}:{x}" for i, x in enumerate(lines)
            if re.search(rf"\b{re.escape(s.name)}\b|\b{re.escape(s.arg())}\b", x)][:16]  # fmt: skip
    msgs += [
        {
            "role": "assistant",
            "content": "Searching the repository.\n"
            + call("grep", pattern=rf"\b({s.name}|{s.arg()})\b", path="."),
        },  # fmt: skip
        {"role": "user", "content": result("grep", "\n".join(hits) or "(no matches)")},
        {
            "role": "user",
            "content": "List every matching line that mentions "
            f"`{s.arg()}`, with its line number, exactly as grep printed it.",
        },  # fmt: skip
    ]
    return msgs


def diff_for(s: Source) -> str:
    old, new = s.body.splitlines(), guarded(s).splitlines()
    sig_end = next((i for i, x in enumerate(old) if x.rstrip().endswith(":")), 0)
    ctx = old[max(0, sig_end - 2) : sig_end + 1]
    after = old[sig_end + 1 : sig_end + 4]
    body = [f" {x}" for x in ctx] + [f"+{x}" for x in new[sig_end + 1 : sig_end + 3]]
    body += [f" {x}" for x in after]
    start = s.line + max(0, sig_end - 2)
    return (f"--- a/{s.path}\n+++ b/{s.path}\n@@ -{start},{len(ctx) + len(after)} "
            f"+{start},{len(ctx) + len(after) + 2} @@\n" + "\n".join(body))  # fmt: skip


def commit_message(s: Source) -> list[dict[str, str]]:
    msgs = opening(s, f"Make `{s.name}` accept None for `{s.arg()}`, then commit.")
    msgs += [
        {
            "role": "assistant",
            "content": "Applying a guard at the top of the function.\n"
            + call("apply_patch", diff=diff_for(s)),
        },  # fmt: skip
        {"role": "user", "content": result("apply_patch", "Patch applied cleanly (1 file).")},
        {
            "role": "assistant",
            "content": "Checking the diff.\n"
            + call("run_shell", command="git diff --stat && git diff", timeout_s=30),
        },  # fmt: skip
        {
            "role": "user",
            "content": result(
                "run_shell", f" {s.path} | 2 ++\n 1 file changed, 2 insertions(+)\n" + diff_for(s)
            ),
        },  # fmt: skip
        {
            "role": "user",
            "content": "Write the commit message (a subject line and a short body).",
        },  # fmt: skip
    ]
    return msgs


def write_test(s: Source) -> list[dict[str, str]]:
    msgs = opening(s, f"Add a pytest test for `{s.name}` in tests/test_"
                   f"{s.module.split('.')[-1]}.py.")  # fmt: skip
    msgs += [
        {
            "role": "assistant",
            "content": "Let me see the existing tests first.\n"
            + call(
                "run_shell",
                command=f"sed -n 1,30p tests/test_{s.module.split('.')[-1]}.py",
                timeout_s=10,
            ),
        },  # fmt: skip
        {
            "role": "user",
            "content": result(
                "run_shell",
                f"import pytest\n\nfrom "
                f"{s.module} import {s.name}\n\n\ndef test_{s.name.strip('_')}_smoke():\n    "
                f"assert {s.name} is not None\n",
            ),
        },  # fmt: skip
        {
            "role": "user",
            "content": "Write the new test function; start from the existing test's imports.",
        },  # fmt: skip
    ]
    return msgs


def log_triage(s: Source) -> list[dict[str, str]]:
    msgs = opening(s, f"The nightly job fails somewhere in {s.path}. Look at the log.")
    entries = []
    for i in range(12):
        level = "ERROR" if i in (8, 9) else ("WARNING" if i % 7 == 3 else "INFO")
        what = (f"{s.name}() raised TypeError: unsupported operand for NoneType: '{s.arg()}'"
                if level == "ERROR" else f"processed batch {i} ({40 + 3 * i} records) in "
                f"{0.2 + i / 50:.2f}s")  # fmt: skip
        entries.append(f"2026-11-{10 + i // 6:02d}T03:{i * 3:02d}:11Z {level:<7} "
                       f"{s.module}: {what}")  # fmt: skip
    msgs += [
        {
            "role": "assistant",
            "content": "Reading the job's log.\n"
            + call("run_shell", command="tail -n 12 /var/log/nightly.log", timeout_s=10),
        },
        {"role": "user", "content": result("run_shell", "\n".join(entries))},
        {
            "role": "user",
            "content": "What went wrong? Quote the log lines that show it and "
            "the line of the function where it happens.",
        },  # fmt: skip
    ]
    return msgs


def json_edit(s: Source) -> list[dict[str, str]]:
    config = {
        "name": s.module, "version": "2.4.1", "entry": f"{s.module}:{s.name}",
        "settings": {"timeout_s": 30, "retries": 3, "log_level": "info",
                     "cache_dir": f"/var/cache/{s.module}", "workers": 4},
        "checks": [{"name": f"{s.name}-{k}", "enabled": k % 2 == 0, "args": [s.arg(), k]}
                   for k in range(6)],
    }  # fmt: skip
    text = json.dumps(config, indent=2)
    msgs = [
        {"role": "system", "content": system_prompt(s.repo)},
        {
            "role": "user",
            "content": "Raise the timeout to 90 seconds and enable every check in config.json.",
        },  # fmt: skip
        {
            "role": "assistant",
            "content": "Reading the config.\n" + call("read_file", path="config.json"),
        },  # fmt: skip
        {"role": "user", "content": result("read_file", text)},
        {"role": "user", "content": "Go ahead: call write_file with the whole new config.json."},
    ]
    return msgs


def explain(s: Source) -> list[dict[str, str]]:
    msgs = opening(s, f"I don't understand `{s.name}` in {s.path}.")
    msgs += [{"role": "user", "content": f"In two or three sentences: what does `{s.name}` "
              f"do with `{s.arg()}`, and what does it return?"}]  # fmt: skip
    return msgs


KINDS: dict[str, Callable[[Source], list[dict[str, str]]]] = {
    "fix": fix_show, "write": write_whole, "grep": grep_sites, "commit": commit_message,
    "test": write_test, "log": log_triage, "json": json_edit, "explain": explain,
}  # fmt: skip
PER_KIND = 2


def to_toml(name: str, what: str, module: str, msgs: list[dict[str, str]]) -> str:
    esc = json.dumps
    out = (
        f'name = {esc(name)}\nkind = "agent"\ndescription = {esc(what)}\nchat = true\n'
        f"temperature = 0.0\nmax_tokens = {MAX_TOKENS}\n# from the stdlib module {module}\n"
    )
    for m in msgs:
        out += f"\n[[messages]]\nrole = {esc(m['role'])}\ncontent = {toml_string(m['content'])}\n"
    return out


def build() -> list[tuple[str, str]]:
    """(name, TOML text) of every conversation: PER_KIND of each kind, each kind on
    other modules."""
    srcs = list(sources())
    out: list[tuple[str, str]] = []
    for k, (kind, make) in enumerate(KINDS.items()):
        for j in range(PER_KIND):
            s = srcs[(k + j * len(KINDS)) % len(srcs)]
            name = f"agent-{kind}-{s.module.replace('.', '-')}"
            text = to_toml(name, f"agent turn: {kind} ({s.module}.{s.name})", s.module, make(s))
            parse_workload(text)  # it must load
            out.append((name, text))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", nargs="?", type=Path, default=OUT)
    args = p.parse_args(argv)
    counts = {"tuning": 0, "validation": 0}
    for split in counts:
        (args.out / split).mkdir(parents=True, exist_ok=True)
        for old in (args.out / split).glob("*.toml"):
            old.unlink()
    for name, text in build():
        split = split_of(name)
        counts[split] += 1
        (args.out / split / f"{name}.toml").write_text(text, encoding="utf-8")
    print(f"tuning {counts['tuning']}, validation {counts['validation']} in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
