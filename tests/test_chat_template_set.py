"""Every template in llama.cpp's own test set renders with edgespec's one renderer.

The set is tests/data/llama_cpp_templates/ (see its README.md): 70 real models'
templates, with loop controls, HF's generation tag, a template that refuses the
system role and one that needs tool definitions.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from edgespec.chat_template import ChatTemplateError, render_chat, supports_system_role

SET = Path(__file__).parent / "data" / "llama_cpp_templates"
TEMPLATES = sorted(p.name for p in SET.glob("*.jinja"))

CONVERSATION = [
    {"role": "system", "content": "SysBrief-1f4"},
    {"role": "user", "content": "UserAsks-2c9"},
    {"role": "assistant", "content": "AssistantSays-3a7"},
    {"role": "user", "content": "UserAgain-4e2"},
]
# templates that cannot render a plain conversation, and what each needs
NEEDS = {"fireworks-ai-llama-3-firefunction-v2.jinja": "functions"}
# templates that refuse a system message, which the renderer folds into the user's
REFUSE_SYSTEM = {"google-gemma-2-2b-it.jinja"}


def _render(name: str, **kwargs: object) -> str:
    template = (SET / name).read_text(encoding="utf-8")
    return render_chat(template, CONVERSATION, bos_token="<s>", eos_token="</s>", **kwargs)


def test_the_set_is_llama_cpps_seventy() -> None:
    assert len(TEMPLATES) == 70
    assert set(NEEDS) | REFUSE_SYSTEM <= set(TEMPLATES)
    assert (SET / "README.md").read_text().count("0c1e57098bba43ac29e6e3b677cdceebdd22334f") == 1


@pytest.mark.parametrize("name", TEMPLATES)
def test_template_renders_system_user_assistant_user(name: str) -> None:
    if name in NEEDS:
        with pytest.raises(ChatTemplateError, match=f"needs '{NEEDS[name]}'"):
            _render(name)
        return
    text = _render(name, add_generation_prompt=True)
    # every message's text, the system's too (folded or not); the turns in order
    # (Mistral-Nemo's puts the system text in the last user turn)
    where = [text.find(m["content"]) for m in CONVERSATION]
    assert -1 not in where, (name, where, text)
    assert where[1:] == sorted(where[1:]), (name, where, text)
    # a generation prompt where the template writes one (Mistral's and command-r7b's
    # always end ready for the assistant); Phi-3.5's ends with EOS without one
    without = _render(name, add_generation_prompt=False)
    uses_it = "add_generation_prompt" in (SET / name).read_text(encoding="utf-8")
    assert (text != without) == uses_it


def test_which_templates_refuse_a_system_message() -> None:
    refusing = {n for n in TEMPLATES if not supports_system_role((SET / n).read_text())}
    assert refusing == REFUSE_SYSTEM
    # gemma-2 raises on a system message; folded, its text opens the first user turn
    text = _render("google-gemma-2-2b-it.jinja")
    assert "<start_of_turn>user\nSysBrief-1f4\nUserAsks-2c9<end_of_turn>" in text
    assert "<start_of_turn>system" not in text
