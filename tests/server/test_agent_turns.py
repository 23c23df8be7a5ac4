"""A multi-turn agent conversation with tools through /v1/chat/completions: greedy
speculative (n-gram, gamma 4) equals plain turn by turn, and each turn pays only for
its new tokens (the prompt's earlier turns come from the slot's cache). Prompts take
the tiled kernel and replies the one-row one (docs/architecture.md, "Prompt kernels"):
both servers must keep the same positions on the same kernels across turns."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from openai import OpenAI

from edgespec.completion.session import load_session
from tests.server.conftest import Running, start

pytestmark = pytest.mark.real_model

READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a text file from disk and return its contents.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
}
PATH = "/srv/app/slots.py"


@pytest.fixture(scope="module")
def servers(real_model_paths) -> Iterator[dict[str, Running]]:
    path = str(real_model_paths["gemma-3-270m"])
    out = {
        d or "plain": start(load_session(path, d, gamma=4, n_ctx=4096, name="gemma"))
        for d in ("ngram", None)
    }
    yield out
    for running in out.values():
        running.server.close()
        running.session.target.close()


def _file_text() -> str:
    import edgespec.server.slots as slots

    with open(slots.__file__, encoding="utf-8") as f:
        return f.read()[:3000]  # about 800 tokens of tool output


def _calls(r) -> list[tuple[str, str]]:
    """A reply's calls, as (name, arguments): their ids are random."""
    return [(c.function.name, c.function.arguments) for c in r.choices[0].message.tool_calls or []]


def test_agent_turns_are_exact_and_pay_only_for_new_tokens(servers) -> None:
    clients = {
        k: OpenAI(base_url=r.base + "/v1", api_key="x", max_retries=0, timeout=300)
        for k, r in servers.items()
    }
    messages: list[dict] = [
        {"role": "user", "content": f"Read {PATH} and tell me what the Slot class keeps."}
    ]
    call = {"id": "call_1", "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": PATH})}}  # fmt: skip
    turns = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": _file_text()},
    ]
    last_prompt = 0
    for turn in range(3):
        replies = {}
        for name, client in clients.items():
            r = client.chat.completions.create(
                model="gemma", messages=messages, tools=[READ_FILE], max_tokens=40,
                temperature=0,
            )  # fmt: skip
            replies[name] = r
        spec, plain = replies["ngram"], replies["plain"]
        assert spec.choices[0].message.content == plain.choices[0].message.content, turn
        assert _calls(spec) == _calls(plain), turn
        for r in replies.values():
            cached = r.usage.prompt_tokens_details.cached_tokens
            if turn:  # the earlier turns, up to where their reply's text was cut, cached
                assert cached >= last_prompt - 8, (turn, cached, last_prompt)
        last_prompt = plain.usage.prompt_tokens
        reply = plain.choices[0].message.content or ""
        if turn == 0:
            messages += turns
        else:
            messages += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": "And what does it do when every slot is busy?"},
            ]
