"""Chat templates rendered as HF/llama.cpp do, and completion mode."""

from __future__ import annotations

import pytest
from edgespec_tui.prompt import ChatMessage, ChatTemplateError, PromptFormat, completion_text

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
    fmt = PromptFormat(CHATML, "<|im_start|>", "<|im_end|>")
    text = fmt.render(
        [ChatMessage("user", "Hi"), ChatMessage("assistant", "Yo"), ChatMessage("user", "Again")]
    )
    assert text == (
        "<|im_start|>system\nYou are helpful<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n"
        "<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n"
    )
    assert fmt.chat_mode and not fmt.starts_with_bos("<|im_end|>")


def test_bos_token_and_raise_exception() -> None:
    fmt = PromptFormat(GEMMA_LIKE, "<bos>", "<eos>")
    text = fmt.render([ChatMessage("user", " Hi ")])
    assert text == "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    assert fmt.starts_with_bos(text)
    with pytest.raises(ChatTemplateError, match="alternate"):
        fmt.render([ChatMessage("assistant", "first")])


def test_broken_template_is_an_edgespec_error() -> None:
    with pytest.raises(ChatTemplateError):
        PromptFormat("{% for x in %}").render([ChatMessage("user", "Hi")])


def test_completion_mode_is_one_document() -> None:
    fmt = PromptFormat(None)
    assert not fmt.chat_mode
    msgs = [
        ChatMessage("user", "Once upon a time"),
        ChatMessage("assistant", " there was a sea."),
        ChatMessage("user", "The end"),
    ]
    assert fmt.render(msgs) == "Once upon a time there was a sea.\nThe end"
    assert completion_text([ChatMessage("user", "a "), ChatMessage("user", "b")]) == "a b"
