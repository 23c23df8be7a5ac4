"""edgespec's one chat-template renderer: HF/llama.cpp semantics and the BOS rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgespec.backend import LlamaModel
from edgespec.chat_template import CHATML, ChatFormat, ChatTemplateError, render_chat
from edgespec.errors import InvalidParameterError

WRITES_BOS = (
    "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
)
MSGS = [{"role": "user", "content": "Hello world"}]


def test_render_chat_helpers_and_errors() -> None:
    assert (
        render_chat(CHATML, MSGS)
        == "<|im_start|>user\nHello world<|im_end|>\n<|im_start|>assistant\n"
    )
    assert render_chat(CHATML, MSGS, add_generation_prompt=False).endswith("<|im_end|>\n")
    assert render_chat("{{ strftime_now('%Y') | length }}", MSGS) == "4"
    with pytest.raises(ChatTemplateError, match="refused the conversation: no") as e:
        render_chat("{{ raise_exception('no') }}", MSGS)
    assert isinstance(e.value, InvalidParameterError)  # the server's 400, the CLI's one line
    with pytest.raises(ChatTemplateError, match="does not parse"):
        render_chat("{% if %}", MSGS)


def test_leading_bos_text_goes_only_where_the_tokenizer_adds_one() -> None:
    keeps = ChatFormat(WRITES_BOS, "<s>", "</s>", add_bos=False)
    assert keeps.render(MSGS) == "<s>[user] Hello world\n"
    drops = ChatFormat(WRITES_BOS, "<s>", "</s>", add_bos=True)
    assert drops.render(MSGS) == "[user] Hello world\n"
    # no BOS text, or a template that does not write it: nothing to drop
    assert ChatFormat(WRITES_BOS, "", "", add_bos=True).render(MSGS) == "[user] Hello world\n"
    assert ChatFormat(CHATML, "<s>", add_bos=True).render(MSGS).startswith("<|im_start|>user")


def test_a_model_prompt_starts_with_one_bos(synthetic_models: dict[str, Path]) -> None:
    with LlamaModel(synthetic_models["target"], n_ctx=64, n_threads=1) as model:
        info = model.vocab_info()
        assert info.add_bos and info.bos >= 0
        fmt = ChatFormat.of(model, WRITES_BOS)
        assert fmt.bos_token == model.token_bytes(info.bos, special=True).decode()
        assert fmt.bos_token and fmt.add_bos
        tokens = model.tokenize(fmt.render(MSGS), add_special=True, parse_special=True)
        assert tokens[0] == info.bos and tokens[1] != info.bos
        plain = model.tokenize("[user] Hello world\n", add_special=True, parse_special=True)
        assert tokens == plain
