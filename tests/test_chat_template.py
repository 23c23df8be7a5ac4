"""edgespec's one chat-template renderer: HF/llama.cpp semantics and the BOS rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edgespec.backend import LlamaModel
from edgespec.chat_template import (
    CHATML,
    ChatFormat,
    ChatTemplateError,
    fold_system_messages,
    render_chat,
    supports_system_role,
)
from edgespec.errors import InvalidParameterError

WRITES_BOS = (
    "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
)
MSGS = [{"role": "user", "content": "Hello world"}]
TURNS = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
# gemma-2's way: raise_exception on a system message
REFUSES_SYSTEM = (
    "{% for m in messages %}{% if m['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
)
DROPS_SYSTEM = (
    "{% for m in messages if m['role'] != 'system' %}<{{ m['role'] }}>{{ m['content'] }}"
    "{% endfor %}"
)
CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello"},
    {"role": "user", "content": "Bye"},
]


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


def test_loop_controls_and_the_generation_tag() -> None:
    two = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    brk = "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.content }}"
    brk += "{% endfor %}"
    assert render_chat(brk, two) == "a"
    cont = "{% for m in messages %}{% if loop.first %}{% continue %}{% endif %}{{ m.content }}"
    cont += "{% endfor %}"
    assert render_chat(cont, two) == "b"
    # HF's {% generation %} marks the assistant's text for training masks: here its body renders
    gen = (
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% generation %}"
        "[{{ m.content }}]{% set ns.n = ns.n + 1 %}{% endgeneration %}{% endfor %}{{ ns.n }}"
    )
    assert render_chat(gen, two) == "[a][b]2"
    with pytest.raises(ChatTemplateError, match="does not parse"):
        render_chat("{% generation %}unclosed", two)


def test_tojson_is_transformers_not_jinjas() -> None:
    data = "{{ {'b': '<x> & y', 'a': 'caf\u00e9'} | tojson }}"
    # no HTML escaping, no sorting, no ASCII escapes unless asked
    assert render_chat(data, MSGS) == '{"b": "<x> & y", "a": "caf\u00e9"}'
    assert render_chat("{{ 'caf\u00e9' | tojson(ensure_ascii=True) }}", MSGS) == '"caf\\u00e9"'
    assert render_chat("{{ [1] | tojson(indent=2) }}", MSGS) == "[\n  1\n]"
    both = "{{ {'b': 1, 'a': 2} | tojson(separators=(',', ':'), sort_keys=true) }}"
    assert render_chat(both, MSGS) == '{"a":2,"b":1}'


def test_llama_cpps_date_variables() -> None:
    text = render_chat("{{ datetime }}|{{ date_string }}", MSGS)
    month_day_year, day_month_year = text.split("|")
    assert re.fullmatch(r"[A-Z][a-z]{2} \d{2} \d{4}", month_day_year)
    assert re.fullmatch(r"\d{2} [A-Z][a-z]{2} \d{4}", day_month_year)


def test_a_variable_the_template_needs_is_named() -> None:
    with pytest.raises(ChatTemplateError, match=r"needs 'functions' \(the tool definitions"):
        render_chat("{{ 'Available functions:' + functions }}", MSGS)
    with pytest.raises(ChatTemplateError, match="needs 'knowledge', which edgespec does not"):
        render_chat("{{ 'x' + knowledge }}", MSGS)
    # printing an undefined variable is no error (jinja2, HF and llama.cpp alike)
    assert render_chat("[{{ tools }}][{{ documents }}]", MSGS) == "[][]"
    # an undefined attribute is the conversation's failure, not a missing input
    with pytest.raises(ChatTemplateError, match="failed on this conversation"):
        render_chat("{{ messages[0].nope + 'x' }}", MSGS)


def test_system_messages_fold_into_user_turns() -> None:
    assert fold_system_messages(CHAT) == [
        {"role": "user", "content": "Be brief.\nHi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Bye"},
    ]
    assert CHAT[0] == {"role": "system", "content": "Be brief."}  # the caller's list is untouched
    # several in a row join; before an assistant or at the end, a user message of their own
    odd = [
        {"role": "system", "content": "A"},
        {"role": "system", "content": "B"},
        {"role": "assistant", "content": "x"},
        {"role": "system", "content": "C"},
        {"role": "user", "content": ""},
        {"role": "system", "content": "D"},
    ]
    assert fold_system_messages(odd) == [
        {"role": "user", "content": "A\nB"},
        {"role": "assistant", "content": "x"},
        {"role": "user", "content": "C"},
        {"role": "user", "content": "D"},
    ]


def test_a_template_that_refuses_or_drops_the_system_role_gets_it_folded() -> None:
    assert supports_system_role(TURNS) and supports_system_role(CHATML)
    assert render_chat(TURNS, CHAT) == "<system>Be brief.<user>Hi<assistant>Hello<user>Bye"
    folded = "<user>Be brief.\nHi<assistant>Hello<user>Bye"
    for template in (REFUSES_SYSTEM, DROPS_SYSTEM):
        assert not supports_system_role(template)
        assert render_chat(template, CHAT) == folded
        assert ChatFormat(template, "<s>", add_bos=True).render(CHAT) == folded
    # no system message: nothing to fold
    assert render_chat(REFUSES_SYSTEM, CHAT[1:]) == "<user>Hi<assistant>Hello<user>Bye"
    # a template failing on [system, user] for another reason is not folded for it: its
    # own error stands
    needs = "{{ functions + '' }}" + TURNS
    assert supports_system_role(needs)
    with pytest.raises(ChatTemplateError, match="needs 'functions'"):
        render_chat(needs, CHAT)
