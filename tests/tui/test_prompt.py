"""Chat templates rendered as HF/llama.cpp do (by edgespec's renderer), and completion mode."""

from __future__ import annotations

import pytest
from edgespec_tui.prompt import ChatMessage, PromptFormat, completion_text

from edgespec.chat_template import ChatFormat, ChatTemplateError
from edgespec.errors import EdgespecError

CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are helpful<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
GEMMA_LIKE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('roles must alternate') }}{% endif %}"
    "<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def test_chatml_with_generation_prompt() -> None:
    fmt = PromptFormat(ChatFormat(CHATML, "<|im_start|>", "<|im_end|>"))
    text = fmt.render(
        [ChatMessage("user", "Hi"), ChatMessage("assistant", "Yo"), ChatMessage("user", "Again")]
    )
    assert text == (
        "<|im_start|>system\nYou are helpful<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n"
        "<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n"
    )
    assert fmt.chat_mode


def test_bos_token_and_raise_exception() -> None:
    turn = "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    fmt = PromptFormat(ChatFormat(GEMMA_LIKE, "<bos>", "<eos>"))
    assert fmt.render([ChatMessage("user", " Hi ")]) == "<bos>" + turn
    # a tokenizer that adds BOS itself: the template's BOS text goes, so the prompt has one
    adds_bos = PromptFormat(ChatFormat(GEMMA_LIKE, "<bos>", "<eos>", add_bos=True))
    assert adds_bos.render([ChatMessage("user", " Hi ")]) == turn
    with pytest.raises(ChatTemplateError, match="alternate"):
        fmt.render([ChatMessage("assistant", "first")])


def test_broken_template_is_an_edgespec_error() -> None:
    with pytest.raises(ChatTemplateError, match="does not parse") as e:
        PromptFormat(ChatFormat("{% for x in %}")).render([ChatMessage("user", "Hi")])
    assert isinstance(e.value, EdgespecError)


def test_completion_mode_is_one_document() -> None:
    fmt = PromptFormat(None)
    assert not fmt.chat_mode and not PromptFormat().chat_mode
    msgs = [
        ChatMessage("user", "Once upon a time"),
        ChatMessage("assistant", " there was a sea."),
        ChatMessage("user", "The end"),
    ]
    assert fmt.render(msgs) == "Once upon a time there was a sea.\nThe end"
    assert completion_text([ChatMessage("user", "a "), ChatMessage("user", "b")]) == "a b"
